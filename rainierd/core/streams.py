"""Sequence accounting per stream (a node's or a site's frames from one
publisher): what is lost, what is late, what is a restart, what is stale.

Every frame carries its publisher's sequence number for that node, +1 a
frame.  Against the stream's last applied frame, a frame is:

* **next or after a gap**: applied; the frames skipped are **missing**: each
  is remembered for the next 16 frames of its stream in case it arrives
  late, and only then counted **lost** (so the lost counter never has to go
  back down);
* **late**: older than the last one, one of those still missing: counted
  late, never lost (the state already holds newer data, so it is not
  applied);
* **a restart**: not newer, yet sampled later than the last one applied (its
  publisher restarted with the same id and counts from its start again):
  applied, counted, and the stream starts over from it; its counters count
  from the publisher's new start, so no rate is taken across it (``rebased``);
* **stale**: anything else not newer (a duplicate, a replay): rejected;
* **a jump**: newer by more than ``max_jump`` frames: rejected, not believed
  (one corrupt or forged ``seq`` would otherwise count a million frames lost
  and make every genuine frame after it stale).  The stream remembers it, and
  only if the next frame continues from it (within the window, and sampled
  later than the last one applied) does the stream believe it: the frames
  skipped are counted lost (a monitor that was away longer than ``max_jump``
  frames, with its checkpoint) but for the rejected one, and the stream goes
  on from there, counted as a restart.  A lone bad number changes nothing.

A frame from another publisher than the stream's starts the stream over
(a fail-over, or a restart under a new id), counted as a publisher change.
A stream that starts over counts what it still had missing as lost: those
frames can no longer be told apart from the new numbering.  Everything is
vectorised over one generation of a window (each stream at most once).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from rainierd._types import F64, I64, U64, B

__all__ = ["WINDOW", "Advance", "Streams"]

WINDOW: Final = 16  # frames a missing frame may come late by before it is counted lost
_ONE: Final = np.uint64(1)
_FULL: Final = np.uint64((1 << WINDOW) - 1)


@dataclass(frozen=True, eq=False)
class Advance:
    """What one generation did to its streams."""

    keep: B  # per frame: apply it
    rebased: B  # per frame: applied, but its counters count from another start (a restart, another publisher)
    lost: int  # frames counted lost now: missing for longer than the window, or left behind by a restart
    late: int  # frames that were missing and arrived after all (not lost, not applied)
    restarts: int  # same publisher counting from its start again
    changes: int  # another publisher took over a stream
    stale: int  # rejected: not newer, not late, not a restart
    jumps: int  # rejected: newer by more than the plausible jump


class Streams:
    """The sequence state of ``n`` streams, one per node (or site)."""

    def __init__(self, n: int, *, max_jump: int = 100_000) -> None:
        if not WINDOW <= max_jump <= 2**40:
            raise ValueError(f"max_jump must be in [{WINDOW}, 2**40], not {max_jump}")
        self.max_jump = np.uint64(max_jump)
        self.publisher = np.full(n, -1, np.int64)  # -1: no frame yet
        self.seq = np.zeros(n, np.uint64)
        self.t_s = np.full(n, -np.inf)
        self.missing = np.zeros(n, np.uint64)  # bit i: frame seq - 1 - i has not arrived (i < WINDOW)
        self.jumped = np.zeros(n, np.uint64)  # seq of the last rejected jump (0: none since the last frame applied)

    def advance(self, entity: I64, publisher: I64, seq: U64, t_s: F64) -> Advance:
        """Account for one frame of each of the (unique) ``entity`` streams; return what to apply."""
        known = self.publisher[entity]
        last, last_t, missing = self.seq[entity], self.t_s[entity], self.missing[entity]
        same = known == publisher
        ahead = same & (seq > last)
        # A jump is believed only when the frame after it continues from it.
        jumped = self.jumped[entity]
        implausible = ahead & (seq - last - _ONE > self.max_jump)
        confirmed = implausible & (jumped > 0) & (seq > jumped) & (seq - jumped <= WINDOW) & (t_s > last_t)
        jump = implausible & ~confirmed
        newer = ahead & ~implausible
        older = same & ~ahead
        restart = (older & (t_s > last_t)) | confirmed
        # How far behind the last applied frame an older one is, and whether it is one still missing.
        behind = np.where(older & ~restart & (seq < last), last - seq - _ONE, np.uint64(WINDOW))
        at = np.minimum(behind, np.uint64(WINDOW - 1))
        late = older & ~restart & (behind < WINDOW) & ((missing >> at) & _ONE).astype(bool)
        stale = older & ~restart & ~late
        keep = ~same | newer | restart
        self.jumped[entity] = np.where(jump, seq, np.where(keep, np.uint64(0), jumped))

        # A gap's frames take the low bits; earlier ones move up, and those
        # pushed past the window (or never fitting in it) are lost.
        gap = np.where(newer, seq - last - _ONE, np.uint64(0))
        shift = np.minimum(gap + _ONE, np.uint64(WINDOW))
        falling = np.where(newer, missing >> (np.uint64(WINDOW) - shift), np.uint64(0))
        beyond = np.where(gap > WINDOW, gap - np.uint64(WINDOW), np.uint64(0))
        fill = (_ONE << np.minimum(gap, np.uint64(WINDOW))) - _ONE
        updated = np.where(newer, ((missing << shift) | fill) & _FULL, missing)
        updated = np.where(late, updated & ~(_ONE << at), updated)
        restarted = ~same | restart  # a new publisher or numbering: what was missing never comes
        abandoned = np.where(restarted, updated, np.uint64(0))
        updated = np.where(restarted, np.uint64(0), updated)

        self.missing[entity] = updated
        moved = entity[keep]
        self.publisher[moved] = publisher[keep]
        self.seq[moved] = seq[keep]
        self.t_s[moved] = t_s[keep]
        # Python ints: a sum of uint64 gaps and int64 bit counts would be a float64, exact only below 2**53.
        lost = int(np.bitwise_count(falling).sum(dtype=np.int64)) + int(beyond.sum(dtype=np.uint64))
        lost += int(np.bitwise_count(abandoned).sum(dtype=np.int64))
        # A believed jump: what it skipped is lost, but for the jumping frame, already counted rejected.
        lost += int((seq[confirmed] - last[confirmed] - np.uint64(2)).sum(dtype=np.uint64))
        return Advance(
            keep=keep,
            rebased=keep & (known >= 0) & restarted,
            lost=lost,
            late=int(late.sum()),
            restarts=int(restart.sum()),
            changes=int(((known >= 0) & ~same).sum()),
            stale=int(stale.sum()),
            jumps=int(jump.sum()),
        )

    _FIELDS: Final = ("publisher", "seq", "t_s", "missing", "jumped")

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        """Return copies of the sequence state, for a checkpoint."""
        return {name: getattr(self, name).copy() for name in self._FIELDS}

    def restore(self, arrays: dict[str, npt.NDArray[Any]]) -> None:
        """Take the state ``arrays`` gave; raises ValueError unless every array fits these streams."""
        for name in self._FIELDS:
            mine, theirs = getattr(self, name), arrays.get(name)
            if theirs is None or theirs.shape != mine.shape or theirs.dtype != mine.dtype:
                raise ValueError(f"{name}: {None if theirs is None else (theirs.shape, theirs.dtype)} does not fit "
                                 f"{(mine.shape, mine.dtype)}")
        for name in self._FIELDS:
            setattr(self, name, arrays[name].copy())

    def missing_count(self) -> int:
        """Return how many frames are missing now (they may still come late)."""
        return int(np.bitwise_count(self.missing).sum(dtype=np.int64))

    def remap_publishers(self, remap: npt.NDArray[np.int64]) -> None:
        """Renumber publishers after the caller compacted its table (``remap[old] = new``)."""
        self.publisher = np.where(self.publisher >= 0, remap[self.publisher], -1)
