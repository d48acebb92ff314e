"""The monitor's stream checkpoint kept current: restored at start, saved off
the event loop after every analysis, and never left stale after a failed
write (the file format is ``checkpoint_file``).

A checkpoint that cannot be kept current is never restored: a write that
fails removes the last one, or, where its directory refuses that too (a
read-only or immutable directory), marks it stale in place; and at start a
checkpoint whose directory refuses a new file is not taken at all, because
every later save would fail and the next start would take back these same,
older counters (a false reset to Prometheus, and frames applied since counted
lost again).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import structlog

from rainierd.core.ingest import Ingest
from rainierd.monitor.checkpoint_file import can_replace, load_checkpoint, mark_stale, save_checkpoint
from rainierd.monitor.rejections import worth_logging
from rainierd.monitor.snapshot import Checkpointing

__all__ = ["Checkpointer"]

log = structlog.get_logger("rainierd.monitor")


class Checkpointer:
    """Saves and restores ``ingest``'s sequence accounting at ``path`` for the fleet named ``fleet``."""

    def __init__(self, path: Path, ingest: Ingest, *, fleet: str) -> None:
        self.path, self._ingest, self._fleet = path, ingest, fleet
        self.saves = 0
        self.failures = 0
        self.last_save_wall_s = float("nan")

    def frozen(self) -> Checkpointing:
        """Return how the checkpoint is keeping up, as of now."""
        return Checkpointing(self.saves, self.failures, self.last_save_wall_s)

    def restore(self) -> bool:
        """Continue the sequence accounting of the checkpoint file, if there is a usable one.

        A missing, unreadable or foreign checkpoint is logged and ignored: the
        monitor starts afresh (and overwrites it after its first analysis).
        """
        path = self.path
        try:
            arrays = load_checkpoint(path, fleet=self._fleet)
            if arrays is None:
                log.info("no stream checkpoint yet; starting afresh", path=str(path))
                return False
            if not can_replace(path):
                log.warning("stream checkpoint not used: its directory takes no new file, so it could not be kept "
                            "current; starting afresh", path=str(path))
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

    async def save(self) -> None:
        """Save the sequence accounting as of the analysis just finished (the write runs off the loop).

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
            # An older checkpoint left behind would, after a restart, take back counters lower than those
            # already exported (a false reset to Prometheus) and count frames applied since as lost: remove it.
            try:
                path.unlink(missing_ok=True)
            except OSError as unlink_error:
                try:
                    mark_stale(path)
                except OSError as mark_error:
                    if worth_logging(self.failures - 1, self.failures):
                        log.warning("stale stream checkpoint could be neither removed nor marked; remove it before "
                                    "the next start", path=str(path), error=str(unlink_error),
                                    mark_error=str(mark_error))
            if worth_logging(self.failures - 1, self.failures):
                log.warning("stream checkpoint not saved", path=str(path), error=str(exc)[:300],
                            error_type=type(exc).__name__, occurrences=self.failures)
        else:
            self.saves += 1
            self.last_save_wall_s = time.time()
