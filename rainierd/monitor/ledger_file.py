"""The repeat-offender ledger on disk (``actions/ledger.py``): ``<state-file>.ledger``, one JSON document
with its version, written beside the stream checkpoint whenever the ledger changed (to a temporary name,
flushed and renamed, so a crash leaves the old file or the new one, never half) and read back at start.

A missing file starts an empty ledger; one that cannot be used (unreadable, not JSON, another version) is
logged with its reason and the ledger starts empty: a lost ledger forgets repeat offenders, it never
invents one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Final

import structlog

from rainierd.actions import Ledger, LedgerError

log = structlog.get_logger("rainierd.monitor")

MAX_LEDGER_BYTES: Final = 64 * 2**20  # a larger file is not one rainierd wrote (50 entries x 500 chars a node)


def ledger_path(state_file: Path) -> Path:
    """Return where the ledger of the monitor checkpointing at ``state_file`` lives."""
    return state_file.with_name(f"{state_file.name}.ledger")


def save_ledger(path: Path, document: dict[str, Any]) -> None:
    """Replace ``path`` with ``document`` atomically (raises OSError)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as out:
        json.dump(document, out, separators=(",", ":"))
        out.flush()
        os.fsync(out.fileno())
    tmp.replace(path)


def restore_ledger(path: Path, ledger: Ledger) -> bool:
    """Take the ledger at ``path`` back into ``ledger``; return whether one was restored (a missing or unusable
    file is logged and leaves ``ledger`` as it is)."""
    try:
        if path.stat().st_size > MAX_LEDGER_BYTES:
            raise LedgerError(f"{path.stat().st_size} bytes, more than {MAX_LEDGER_BYTES}")
        document = json.loads(path.read_text(encoding="utf-8"))
        entries = ledger.restore(document)
    except FileNotFoundError:
        log.info("no action ledger yet; starting an empty one", path=str(path))
        return False
    except (OSError, ValueError) as exc:  # LedgerError and JSON errors are ValueErrors
        log.warning("action ledger not used; starting an empty one", path=str(path), error=str(exc)[:300],
                    error_type=type(exc).__name__)
        return False
    log.info("action ledger restored", path=str(path), nodes=len(ledger.entries), entries=entries)
    return True
