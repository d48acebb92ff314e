"""The monitor's stream checkpoint kept current: restored at start, saved off
the event loop after every analysis, and never left stale after a failed
write (the file format is ``checkpoint_file``).

A start takes back the newest checkpoint there is, so the counts a monitor
exports must never run ahead of a checkpoint that a later start could take
back: counters shown that then go back read as a reset to Prometheus, and
frames already counted applied would be counted lost again.  Hence each
analysis saves before its snapshot is published (``Monitor.analyse_once``),
and a save that fails leaves nothing older behind: it removes the last
checkpoint, or, where the directory refuses that (immutable, or full), marks
it stale in place.  Where neither works (a read-only volume: no new name, no
write) nothing this run does can tell a later start that the file is old;
so, for as long as that lasts, the run withholds the counters the checkpoint
carries (``stale_left``: absent from every scrape, logged, and
``rainier_monitor_checkpoint_stale`` 1).  Whatever start comes next then
takes back exactly the counts last shown, and counts what this run applied
since as lost, as it would after a SIGKILL just after the last save.  A
save that works again ends it: the new checkpoint holds everything.

Beside it, in ``<file>.learned``, what the detectors and the model have
learned (``core/learned.py``): saved every ``learned_every_s`` (a minute;
baselines learn over 15-minute delays and hour half-lives, so a minute lost
costs nothing), copied off the event loop while no analysis runs and written
by a task the analyses do not wait for; on a stop, saved and awaited.  It is
restored at start independently of the accounting: a missing one, or one of
another layout or topology, is logged with its reason and the monitor learns
afresh.  Unlike the accounting, an older learned file is never harmful (a
baseline an hour old is still the entity's), so a failed write leaves it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any, Protocol

import numpy.typing as npt
import structlog

from rainierd.core.ingest import Ingest
from rainierd.monitor.checkpoint_file import load_checkpoint, mark_stale, save_checkpoint
from rainierd.monitor.snapshot import Checkpointing
from rainierd.runtime import worth_logging

log = structlog.get_logger("rainierd.monitor")


class LearnedSource(Protocol):
    """What keeps learned state (``MonitorCore``): copies it out, and takes it back or says why not."""

    def learned(self) -> dict[str, npt.NDArray[Any]]: ...

    def restore_learned(self, arrays: dict[str, npt.NDArray[Any]]) -> None: ...


class Checkpointer:
    """Saves and restores ``ingest``'s sequence accounting at ``path`` for the fleet named ``fleet``, and what
    ``learned`` has learned beside it (``learned_path``) every ``learned_every_s``."""

    def __init__(self, path: Path, ingest: Ingest, *, fleet: str, learned: LearnedSource | None = None,
                 learned_every_s: float = 60.0) -> None:
        self.path, self._ingest, self._fleet = path, ingest, fleet
        self.saves = 0
        self.failures = 0
        self.last_save_wall_s = float("nan")
        # True while a checkpoint older than the counts is left where a later start would take it back: the last
        # save failed and the file could be neither removed nor marked stale (the counters are then withheld).
        self.stale_left = False
        self._learned, self._learned_every_s = learned, learned_every_s
        self.learned_path = path.with_name(f"{path.name}.learned")
        self.learned_saves = 0
        self.learned_failures = 0
        self.learned_bytes = 0  # the size of the last learned file written
        self._learned_due_s = float("-inf")  # monotonic
        self._learned_writing: asyncio.Future[None] | None = None

    def frozen(self) -> Checkpointing:
        """Return how the checkpoint is keeping up, as of now."""
        return Checkpointing(self.saves, self.failures, self.last_save_wall_s, stale_left=self.stale_left)

    def restore(self) -> bool:
        """Continue the sequence accounting of the checkpoint file, if there is a usable one, and take back the
        learned state beside it, if there is a usable one; return whether the accounting was restored.

        A missing, unreadable or foreign checkpoint is logged and ignored: the
        monitor starts afresh (and overwrites it after its first analysis).
        Either file is used or not on its own.
        """
        restored = self._restore_accounting()
        self._restore_learned()
        return restored

    def _restore_accounting(self) -> bool:
        path = self.path
        try:
            arrays = load_checkpoint(path, fleet=self._fleet)
            if arrays is None:
                log.info("no stream checkpoint yet; starting afresh", path=str(path))
                return False
            self._ingest.restore(arrays)
        except Exception as exc:  # whatever is wrong with the file, the monitor starts afresh
            log.warning("stream checkpoint not used; starting afresh", path=str(path),
                        error=str(exc)[:300], error_type=type(exc).__name__)
            return False
        stats = self._ingest.stats
        log.info("stream checkpoint restored", path=str(path), frames_applied=stats.frames_applied,
                 frames_lost=stats.frames_lost, frames_missing=stats.frames_missing)
        return True

    def _restore_learned(self) -> None:
        """Take back the learned state beside the checkpoint, or log why not (the monitor then learns afresh)."""
        if self._learned is None:
            return
        path = self.learned_path
        try:
            arrays = load_checkpoint(path, fleet=self._fleet)
            if arrays is None:
                log.info("no learned-state checkpoint; baselines learn afresh", path=str(path))
                return
            self._learned.restore_learned(arrays)
        except Exception as exc:  # whatever is wrong with the file, the monitor learns afresh
            log.warning("learned-state checkpoint not used; baselines learn afresh", path=str(path),
                        reason=str(exc)[:300], error_type=type(exc).__name__)
            return
        log.info("learned-state checkpoint restored: baselines continue", path=str(path), arrays=len(arrays))

    async def save_learned(self, *, wait: bool = False) -> None:
        """Copy the learned state (in a thread: call it only while no analysis runs) and write it in a task the
        caller does not wait for, unless ``wait``.  A write still running is waited for when ``wait``, and
        otherwise leaves this save out."""
        if self._learned is None:
            return
        if self._learned_writing is not None and not self._learned_writing.done():
            if not wait:
                return
            with contextlib.suppress(Exception):
                await asyncio.shield(self._learned_writing)
        self._learned_due_s = time.monotonic() + self._learned_every_s
        arrays = await asyncio.to_thread(self._learned.learned)
        self._learned_writing = writing = asyncio.ensure_future(asyncio.to_thread(self._write_learned, arrays))
        if wait:
            await asyncio.shield(writing)

    def _write_learned(self, arrays: dict[str, npt.NDArray[Any]]) -> None:
        """Write the learned state's file (in a thread); a failure is counted and logged, never raised."""
        try:
            save_checkpoint(self.learned_path, arrays, fleet=self._fleet)
            self.learned_bytes = self.learned_path.stat().st_size
        except Exception as exc:  # the last learned file, if any, stays: older baselines are still the fleet's
            self.learned_failures += 1
            if worth_logging(self.learned_failures - 1, self.learned_failures):
                log.warning("learned-state checkpoint not saved", path=str(self.learned_path),
                            error=str(exc)[:300], error_type=type(exc).__name__, occurrences=self.learned_failures)
        else:
            self.learned_saves += 1

    async def save(self, *, final: bool = False) -> None:
        """Save the sequence accounting (``save_accounting``), and the learned state when it is due or ``final``
        (``save_learned``; waited for when ``final``).  Call it only while no analysis runs."""
        await self.save_accounting()
        await self.save_learned_when_due(final=final)

    async def save_learned_when_due(self, *, final: bool = False) -> None:
        """Save the learned state if a minute has passed since the last time, or if ``final`` (then waited for)."""
        if final or time.monotonic() >= self._learned_due_s:
            await self.save_learned(wait=final)

    async def save_accounting(self) -> None:
        """Save the sequence accounting as of the analysis just finished (the write runs off the loop); a failure
        is counted and logged, and leaves no older checkpoint a later start would take back, or else sets
        ``stale_left`` until a save works again.

        Call it only while no analysis runs: the arrays are copied first, on the loop.
        """
        path = self.path
        try:
            arrays = self._ingest.checkpoint()  # copies, taken while no analysis runs
            writing = asyncio.ensure_future(asyncio.to_thread(save_checkpoint, path, arrays, fleet=self._fleet))
            try:
                await asyncio.shield(writing)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):  # a failed write: the save on the way out tries again
                    await writing  # the thread writes on: the save on the way out must not race it for the file
                raise
        except Exception as exc:  # a checkpoint that cannot be written must not stop the monitor
            self.failures += 1
            if worth_logging(self.failures - 1, self.failures):
                log.warning("stream checkpoint not saved", path=str(path), error=str(exc)[:300],
                            error_type=type(exc).__name__, occurrences=self.failures)
            self._leave_nothing_older(path)
        else:
            self.saves += 1
            self.last_save_wall_s = time.time()
            if self.stale_left:
                self.stale_left = False
                log.warning("stream checkpoint saved again: the accounting counters are exported again",
                            path=str(path))

    def _leave_nothing_older(self, path: Path) -> None:
        """After a failed save: remove the last checkpoint, or mark it stale, or else withhold the counters."""
        try:
            path.unlink(missing_ok=True)
        except OSError as unlink_error:
            try:
                mark_stale(path)
            except OSError as mark_error:
                if not self.stale_left:
                    log.warning("stream checkpoint could be neither replaced, removed nor marked stale: the "
                              "accounting counters (rainier_ingest_frames_applied_total, ...) are withheld until a "
                              "save works, so the start that takes it back counts nothing twice", path=str(path),
                              error=str(unlink_error), mark_error=str(mark_error))
                self.stale_left = True
                return
        self.stale_left = False
