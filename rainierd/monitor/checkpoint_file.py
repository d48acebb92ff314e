"""The monitor's sequence accounting on disk, so loss is counted exactly across
a monitor restart: one ``.npz`` file, written after every analysis to a
temporary name, flushed to disk and renamed over the last one, so a crash at
any instant leaves either the old checkpoint or the new one, never half.

What is in it is ``Ingest.checkpoint()``: every stream's last applied
sequence number, what it still has missing, its publisher, and the ingest
counters that go with them, each under its own name.  Format 1 held the
counters as one positional array; a file of it is refused (the monitor then
starts afresh, as for any checkpoint it cannot use).  Nothing of the fleet's state is kept: a
restarted monitor learns that again from the next tick.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from rainierd.errors import RainierdError

FORMAT: Final = 2  # 2: the counters as named arrays (counters.frames_applied, ...)
# Written over a checkpoint's first bytes when it could be neither replaced nor removed (``mark_stale``).
STALE_MARK: Final = b"rainierd: stale checkpoint\n"


class CheckpointError(RainierdError):
    """A checkpoint that cannot be used: unreadable, corrupt, another format or another fleet."""


def save_checkpoint(path: Path, arrays: dict[str, npt.NDArray[Any]], *, fleet: str) -> None:
    """Replace ``path`` with ``arrays`` atomically (raises OSError)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as out:
        np.savez(out, **{"_format": np.array(FORMAT), "_fleet": np.array(fleet), **arrays})  # type: ignore[arg-type]
        out.flush()
        os.fsync(out.fileno())
    tmp.replace(path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself, through a power loss
    finally:
        os.close(directory)


def mark_stale(path: Path) -> None:
    """Overwrite the first bytes of the checkpoint at ``path`` in place, so it is never restored (raises OSError).

    For a checkpoint that could be neither replaced nor removed: a directory
    that refuses new names (read-only, immutable, full) may still let an
    existing file be written.
    """
    with path.open("r+b") as file:
        file.write(STALE_MARK)
        file.flush()
        os.fsync(file.fileno())


def load_checkpoint(path: Path, *, fleet: str) -> dict[str, npt.NDArray[Any]] | None:
    """Return the arrays saved at ``path``, or None if there is no file.

    Raises CheckpointError, saying why, for a file that cannot be used.
    """
    try:
        # One open file for the mark and the arrays, closed here whatever np.load raises: given a path, np.load
        # leaves its file open when the archive turns out to be no archive (a truncated checkpoint).
        with path.open("rb") as file:
            if file.read(len(STALE_MARK)) == STALE_MARK:
                raise CheckpointError(f"{path}: marked stale by a monitor that could not replace it")
            file.seek(0)
            with np.load(file, allow_pickle=False) as saved:
                arrays = {name: saved[name] for name in saved.files}
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointError(f"{path}: {exc.strerror or exc}") from None
    except (ValueError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise CheckpointError(f"{path}: not a checkpoint ({exc})") from None
    found = arrays.pop("_format", None)
    if found is None or found.shape != () or int(found) != FORMAT:
        shown = found.item() if found is not None and found.shape == () else found
        raise CheckpointError(f"{path}: format {shown!r}, not {FORMAT}")
    theirs = arrays.pop("_fleet", None)
    if theirs is None or str(theirs) != fleet:
        raise CheckpointError(f"{path}: saved for fleet {theirs!s}, this one is {fleet}")
    return arrays
