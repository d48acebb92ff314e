"""Sequence accounting per stream (a node's or a site's frames from one
publisher): what is lost, what is late, what is a restart, what is stale, and
what is not believed until several frames confirm it.

Every frame carries its publisher's sequence number for that node, +1 a
frame, and its sample time ``t_s``.  Against the stream's last applied frame,
a frame is:

* **next or after a plausible gap**: applied; the frames skipped are
  **missing**: each is remembered for the next 16 frames of its stream in case
  it arrives late, and only then counted **lost** (so the lost counter never
  has to go back down).  A gap is plausible when its sample time could hold
  it: at most ``WINDOW`` frames plus two a tick of the sample time elapsed;
* **late**: older than the last one, one of those still missing: counted
  late, never lost (the state already holds newer data, so it is not
  applied);
* **a restart**: not newer, yet sampled later than the last one applied (its
  publisher restarted with the same id and counts from its start again):
  applied, counted, and the stream starts over from it; its counters count
  from the publisher's new start, so no rate is taken across it (``rebased``);
* **stale**: anything else not newer (a duplicate, a replay): rejected;
* **far ahead** (held): newer by more than the gap's time could hold or than
  ``max_jump`` (``seq_jump``), sampled more than ``lead_slack_s`` ahead of
  the node's own clock as the monitor knows it (its receive offset) or more
  than that before its last sample (``time_jump``): rejected, not believed.

A frame of another publisher than the stream's takes the stream over at once
only if the stream's publisher has been silent for ``TAKEOVER_SILENCE_TICKS``
ticks of the monitor's listening clock (a fail-over); while it is live, the
other's frames are rejected as ``publisher_unconfirmed``.

**Confirmation.**  Every frame refused above (held, stale, unconfirmed
publisher) is a candidate for a new numbering.  ``CONFIRM`` (3) consecutive
candidates of one publisher, each newer than the one before by at most
``WINDOW``, sampled later and no further ahead than its seq can explain,
with the same receive offset within ``lead_slack_s``, received over at least
``CONFIRM - 1`` half-ticks of listening, and with no frame of the current
numbering applied between them, confirm it: the last is applied and the
stream starts over there (a restart, or a publisher change).  So a lone
forged frame, or a burst of them, changes nothing, and a stream poisoned
anyway (its first frame was the forgery) recovers after ``CONFIRM`` genuine
frames.  A renumber counts lost only what it can have seen: the candidate's
own gaps, and for a jump ahead, the frames skipped up to the candidate's
first, at most what the sample time between could hold at one a tick
(``round(dt / tick_s) - 1``).

A stream that starts over counts what it still had missing as lost: those
frames can no longer be told apart from the new numbering.

**A stream that falls silent.**  The window above resolves a missing frame
only when later frames of its stream arrive; a publisher that stops (it
ended, moved on, or its node died) would leave its last gaps missing for
ever, and applied + lost would never add up to what was published.  So
``expire`` counts a stream's missing frames lost once it has applied no
frame for ``WINDOW`` ticks of the listening clock (the monitor connected and
keeping up: an outage or a backlog ages nothing).  A straggler that still
comes after that is refused as stale, never counted twice.

**Receive offset.**  Each stream keeps a floor of its receive lag (receipt
on the monitor's receive clock minus ``t_s``: its publisher's clock offset
plus the transport's), which follows the lag down at once and rises by
``LAG_FLOOR_RISE`` seconds a second of sample time (clock drift).  It is that
publisher's own offset: a new publisher or numbering starts it again from its
first frame.  The excess of a frame's lag over its own stream's floor is what
queueing before the monitor adds; the load judgement takes that, so neither
a publisher's clock skew, nor its sampling phase, nor a forged sample time
moves it.  The receive clock is the wall clock moved on by the monotonic
clock only (``monitor/inbox.py``), so a step of the monitor's own clock
moves no lag either.

Everything is vectorised over one generation of a window (each stream at most
once).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from rainierd._types import F64, I64, U64, B

WINDOW: Final = 16  # frames a missing frame may come late by before it is counted lost
CONFIRM: Final = 3  # consecutive consistent frames that confirm a new numbering or publisher
TAKEOVER_SILENCE_TICKS: Final = 2  # listening ticks a stream's publisher is silent before another takes it at once
LAG_FLOOR_RISE: Final = 1 / 300  # seconds a stream's receive-lag floor rises per second of sample time
_ONE: Final = np.uint64(1)
_FULL: Final = np.uint64((1 << WINDOW) - 1)


@dataclass(frozen=True, eq=False)
class Advance:
    """What one generation did to its streams."""

    keep: B  # per frame: apply it
    rebased: B  # per frame: applied, but its counters count from another start (a restart, another publisher)
    excess_lag_s: F64  # per frame: receive lag above its stream's floor (0 for a stream's first; NaN if unknown)
    # Per frame: its stream's sample interval, the sample time since the stream's last frame over the frames that
    # time held by seq (lost ones included); NaN unless it continues its stream (the first, a restart, a takeover).
    interval_s: F64
    lost: int  # frames counted lost now: missing for longer than the window, or left behind by a restart
    late: int  # frames that were missing and arrived after all (not lost, not applied)
    restarts: int  # same publisher counting from its start again (or a confirmed renumber)
    changes: int  # another publisher took over a stream
    stale: int  # rejected: not newer, not late, not a restart
    jumps: int  # rejected: seq further ahead than the gap's time could hold, not (yet) confirmed
    time_jumps: int  # rejected: sampled far ahead of the node's clock, or far before its last sample
    unconfirmed: int  # rejected: another publisher's frame while the stream's own is live


class Streams:
    """The sequence state of ``n`` streams, one per node (or site)."""

    def __init__(self, n: int, *, max_jump: int = 100_000, tick_s: float = 1.0,
                 lead_slack_s: float | None = None) -> None:
        if not WINDOW <= max_jump <= 2**40:
            raise ValueError(f"max_jump must be in [{WINDOW}, 2**40], not {max_jump}")
        if not tick_s > 0:
            raise ValueError(f"tick_s must be positive, not {tick_s}")
        self.max_jump = np.uint64(max_jump)
        self.tick_s = float(tick_s)
        # Sampling jitter and a publisher's scheduling stalls stay well inside five ticks (and 5 s).
        self.lead_slack_s = max(5 * tick_s, 5.0) if lead_slack_s is None else float(lead_slack_s)
        self.publisher = np.full(n, -1, np.int64)  # -1: no frame yet
        self.seq = np.zeros(n, np.uint64)
        self.t_s = np.full(n, -np.inf)
        self.missing = np.zeros(n, np.uint64)  # bit i: frame seq - 1 - i has not arrived (i < WINDOW)
        self.offset_s = np.full(n, np.nan)  # floor of the receive lag (receive clock - t_s); NaN: not known
        # Not carried by a checkpoint: the listening clock starts again at 0 in every process.
        self.rx_s = np.full(n, -np.inf)  # listening time the last frame applied was received
        # The candidate numbering (frames refused so far); c_n == 0: none.  Transient: not checkpointed.
        self.c_publisher = np.full(n, -1, np.int64)
        self.c_n = np.zeros(n, np.int64)
        self.c_seq = np.zeros(n, np.uint64)
        self.c_t_s = np.zeros(n)
        self.c_lag_s = np.full(n, np.nan)
        self.c_rx_s = np.zeros(n)  # listening time of the candidate's first frame
        self.c_first_seq = np.zeros(n, np.uint64)
        self.c_first_t_s = np.zeros(n)

    def advance(  # noqa: PLR0915 - the rules share every intermediate; to split
        self, entity: I64, publisher: I64, seq: U64, t_s: F64, *, rx_s: F64, wall_s: F64, shed: F64 | None = None,
    ) -> Advance:
        """Account for one frame of each of the (unique) ``entity`` streams; return what to apply.

        ``rx_s`` is each frame's receipt on the monitor's listening clock, ``wall_s`` on its receive clock
        (NaN where unknown: then no receive offset is judged); ``shed``, how many of its stream's frames the
        monitor itself refused before decoding since the last it kept (over their share: counted there, and
        lost here as a gap), which the seq may lead by beyond what the time could hold.
        """
        tick, slack = self.tick_s, self.lead_slack_s
        known = self.publisher[entity]
        last, last_t, missing = self.seq[entity], self.t_s[entity], self.missing[entity]
        fresh = known < 0
        same = known == publisher
        lag = wall_s - t_s
        offset = self.offset_s[entity]
        with np.errstate(invalid="ignore"):
            # Unknown (NaN) offsets or lags compare False: nothing is judged against them.
            clock_ahead = same & (offset - lag > slack)
        ahead = same & (seq > last)
        gap = np.where(ahead, seq - last, _ONE)
        dt = t_s - last_t
        elapsed = np.where(ahead, np.maximum(dt, 0.0), 0.0)
        # Frames the sample time elapsed could hold, with room for a faster publisher and the late window.
        could_hold = WINDOW + 2.0 * elapsed / tick
        if shed is not None:
            could_hold = could_hold + shed
        seq_far = ahead & ((gap - _ONE > self.max_jump) | ((gap - _ONE).astype(np.float64) > could_hold))
        back_in_time = ahead & (dt < -slack)
        time_far = clock_ahead | back_in_time
        newer = ahead & ~seq_far & ~time_far
        older = same & ~ahead
        restart = older & (t_s > last_t) & ~clock_ahead
        # How far behind the last applied frame an older one is, and whether it is one still missing.
        behind = np.where(older & ~restart & (seq < last), last - seq - _ONE, np.uint64(WINDOW))
        at = np.minimum(behind, np.uint64(WINDOW - 1))
        late = older & ~restart & ~clock_ahead & (behind < WINDOW) & ((missing >> at) & _ONE).astype(bool)
        stale = older & ~restart & ~late & ~clock_ahead
        other = ~fresh & ~same
        takeover = other & (rx_s - self.rx_s[entity] >= TAKEOVER_SILENCE_TICKS * tick)
        refused = (same & (seq_far | time_far)) | stale | (other & ~takeover)

        # A refused frame continues the stream's candidate numbering, or starts one.
        c_pub, c_n, c_seq, c_t = self.c_publisher[entity], self.c_n[entity], self.c_seq[entity], self.c_t_s[entity]
        c_step = np.where(seq > c_seq, seq - c_seq, np.uint64(0))
        with np.errstate(invalid="ignore"):
            cont = refused & (c_n > 0) & (c_pub == publisher) & (c_step >= _ONE) & (c_step <= WINDOW) & (
                t_s > c_t) & (t_s - c_t <= c_step.astype(np.float64) * tick + slack) & ~(
                np.abs(lag - self.c_lag_s[entity]) > slack)
        n_now = np.where(cont, c_n + 1, 1)
        first_rx = np.where(cont, self.c_rx_s[entity], rx_s)
        first_seq = np.where(cont, self.c_first_seq[entity], seq)
        first_t = np.where(cont, self.c_first_t_s[entity], t_s)
        confirmed = refused & (n_now >= CONFIRM) & (rx_s - first_rx >= (CONFIRM - 1) * tick / 2)
        held = refused & ~confirmed
        keep = fresh | newer | restart | takeover | confirmed

        # A gap's frames take the low bits; earlier ones move up, and those
        # pushed past the window (or never fitting in it) are lost.
        gap_frames = np.where(newer, gap - _ONE, np.uint64(0))
        shift = np.minimum(gap_frames + _ONE, np.uint64(WINDOW))
        falling = np.where(newer, missing >> (np.uint64(WINDOW) - shift), np.uint64(0))
        beyond = np.where(gap_frames > WINDOW, gap_frames - np.uint64(WINDOW), np.uint64(0))
        fill = (_ONE << np.minimum(gap_frames, np.uint64(WINDOW))) - _ONE
        updated = np.where(newer, ((missing << shift) | fill) & _FULL, missing)
        updated = np.where(late, updated & ~(_ONE << at), updated)
        over = keep & ~newer & ~fresh  # a new publisher or numbering: what was missing never comes
        abandoned = np.where(over, updated, np.uint64(0))
        updated = np.where(over, np.uint64(0), updated)
        # A confirmed renumber: the candidate's own gaps, and for a jump ahead what the time up to its first
        # frame could hold (one a tick), never more than its seq says.
        own_gaps = np.where(confirmed, (seq - first_seq + _ONE) - n_now.astype(np.uint64), np.uint64(0))
        jumped = confirmed & same & (first_seq > last)
        by_time = np.maximum(np.rint(np.maximum(first_t - last_t, 0.0) / tick) - 1.0, 0.0)
        by_time = np.minimum(by_time, 2.0**62).astype(np.uint64)  # t_s is bounded (LATEST_PLAUSIBLE_S): exact
        skipped = np.where(jumped, np.minimum(np.where(jumped, first_seq - last - _ONE, 0), by_time), 0)

        # The receive-lag floor: the excess over it is the queueing the load judgement looks for.
        excess = np.where(keep & ~over & ~fresh, lag - offset, np.where(keep, 0.0, np.nan))
        floor = np.fmin(offset + LAG_FLOOR_RISE * np.maximum(dt, 0.0), lag)
        floor = np.where(fresh | over, lag, floor)

        self.missing[entity] = updated
        moved = entity[keep]
        self.publisher[moved] = publisher[keep]
        self.seq[moved] = seq[keep]
        self.t_s[moved] = t_s[keep]
        self.rx_s[moved] = rx_s[keep]
        self.offset_s[moved] = floor[keep]
        # Candidates: a frame applied ends its stream's (the current numbering lives); a refused one extends it.
        self.c_n[entity] = np.where(held, n_now, 0)
        waiting = entity[held]
        self.c_publisher[waiting] = publisher[held]
        self.c_seq[waiting] = seq[held]
        self.c_t_s[waiting] = t_s[held]
        self.c_lag_s[waiting] = lag[held]
        self.c_rx_s[waiting] = first_rx[held]
        self.c_first_seq[waiting] = first_seq[held]
        self.c_first_t_s[waiting] = first_t[held]
        # Python ints: a sum of uint64 gaps and int64 bit counts would be a float64, exact only below 2**53.
        lost = int(np.bitwise_count(falling).sum(dtype=np.int64)) + int(beyond.sum(dtype=np.uint64))
        lost += int(np.bitwise_count(abandoned).sum(dtype=np.int64))
        lost += int(own_gaps.sum(dtype=np.uint64)) + int(np.asarray(skipped, np.uint64).sum(dtype=np.uint64))
        with np.errstate(invalid="ignore", divide="ignore"):
            interval = np.where(newer, dt / gap.astype(np.float64), np.nan)
        return Advance(
            keep=keep,
            rebased=over,
            excess_lag_s=excess,
            interval_s=interval,
            lost=lost,
            late=int(late.sum()),
            restarts=int((restart | (confirmed & same)).sum()),
            changes=int((takeover | (confirmed & other)).sum()),
            stale=int((held & stale).sum()),
            jumps=int((held & same & seq_far & ~time_far).sum()),
            time_jumps=int((held & same & time_far).sum()),
            unconfirmed=int((held & other).sum()),
        )

    _FIELDS: Final = ("publisher", "seq", "t_s", "missing")
    _OPTIONAL: Final = ("offset_s",)  # absent from checkpoints before it existed: then not known yet

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        """Return copies of the sequence state, for a checkpoint (the candidates and receipts are transient)."""
        return {name: getattr(self, name).copy() for name in (*self._FIELDS, *self._OPTIONAL)}

    def restore(self, arrays: dict[str, npt.NDArray[Any]]) -> None:
        """Take the state ``arrays`` gave; raises ValueError unless every array fits these streams."""
        for name in (*self._FIELDS, *self._OPTIONAL):
            mine, theirs = getattr(self, name), arrays.get(name)
            if theirs is None and name in self._OPTIONAL:
                continue
            if theirs is None or theirs.shape != mine.shape or theirs.dtype != mine.dtype:
                raise ValueError(f"{name}: {None if theirs is None else (theirs.shape, theirs.dtype)} does not fit "
                                 f"{(mine.shape, mine.dtype)}")
        for name in (*self._FIELDS, *self._OPTIONAL):
            if name in arrays:
                setattr(self, name, arrays[name].copy())
        # The listening clock starts again at 0: a restored stream's silence is measured from this start.
        self.rx_s = np.where(self.publisher >= 0, 0.0, -np.inf)

    def expire(self, rx_now_s: float) -> int:
        """Count lost, and forget, the missing frames of every stream silent for ``WINDOW`` ticks of listening
        before ``rx_now_s``; return how many."""
        silent = (self.missing != 0) & (rx_now_s - self.rx_s >= WINDOW * self.tick_s)
        if not silent.any():
            return 0
        lost = int(np.bitwise_count(self.missing[silent]).sum(dtype=np.int64))
        self.missing[silent] = 0
        return lost

    def missing_count(self) -> int:
        """Return how many frames are missing now (they may still come late)."""
        return int(np.bitwise_count(self.missing).sum(dtype=np.int64))

    def remap_publishers(self, remap: npt.NDArray[np.int64]) -> None:
        """Renumber publishers after the caller compacted its table (``remap[old] = new``)."""
        self.publisher = np.where(self.publisher >= 0, remap[self.publisher], -1)
        # A candidate whose publisher no stream names any more is forgotten (it starts again if it goes on).
        self.c_publisher = np.where(self.c_publisher >= 0, remap[self.c_publisher], -1)
        self.c_n = np.where(self.c_publisher >= 0, self.c_n, 0)
