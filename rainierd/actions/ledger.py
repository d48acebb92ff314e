"""The repeat-offender ledger: each node's history of proposed actions and their causes, so a node that fails
again and again is marked a ``lemon`` with its record (NVSentinel #127 asked for this memory).

Plain data: the policy flags a node each time it proposes an action for it (an escalation too); the monitor
saves ``document()`` beside its stream checkpoint (``<state-file>.ledger``, JSON) and restores it at start
with ``Ledger.of``, so a restart keeps the record.  Nodes are keyed by name (hostname, or ``n<id>``), which
outlives a renumbered inventory.  A node's flags older than the ledger's window are forgotten, and at most
``history`` entries a node are kept.
"""

from __future__ import annotations

from typing import Any, Final

from rainierd.actions.model import ACTIONS, LedgerRecord
from rainierd.errors import RainierdError

LEDGER_VERSION: Final = 1
_MAX_TEXT: Final = 500  # a cause line kept at most this long


class LedgerError(RainierdError, ValueError):
    """A ledger document that cannot be used: another version, or not the shape ``document()`` writes."""


class Ledger:
    """Each node's (wall time, action, cause) entries, oldest first; lemons: ``flags`` within ``days``."""

    def __init__(self, *, flags: int = 3, days: float = 30.0, history: int = 50) -> None:
        self.flags, self.window_s, self.history = flags, days * 86_400.0, history
        self.entries: dict[str, list[tuple[float, str, str]]] = {}
        self.changed = False  # flagged or pruned since the last ``document()``

    def flag(self, node: str, *, t_s: float, action: str, cause: str) -> None:
        """Record that ``action`` was proposed for ``node`` at ``t_s`` because of ``cause``."""
        kept = self.entries.setdefault(node, [])
        kept.append((t_s, action, cause[:_MAX_TEXT]))
        del kept[:-self.history]
        self.changed = True

    def prune(self, t_s: float) -> None:
        """Forget entries older than the window as of ``t_s`` (and nodes left with none)."""
        oldest = t_s - self.window_s
        for node in [n for n, kept in self.entries.items() if kept[0][0] < oldest]:
            kept = [e for e in self.entries[node] if e[0] >= oldest]
            if kept:
                self.entries[node] = kept
            else:
                del self.entries[node]
            self.changed = True

    def record(self, node: str) -> LedgerRecord | None:
        """Return ``node``'s record (None: never flagged within the window)."""
        kept = self.entries.get(node)
        if not kept:
            return None
        return LedgerRecord(node, len(kept), len(kept) >= self.flags, tuple(kept))

    def lemons(self) -> tuple[LedgerRecord, ...]:
        """Return the records of the nodes flagged at least ``flags`` times, most flagged first."""
        out = [LedgerRecord(n, len(kept), True, tuple(kept)) for n, kept in self.entries.items()
               if len(kept) >= self.flags]
        return tuple(sorted(out, key=lambda r: (-r.flagged, r.node)))

    def document(self) -> dict[str, Any]:
        """Return the ledger as plain data (what the monitor saves), and mark it saved."""
        self.changed = False
        return {"version": LEDGER_VERSION,
                "nodes": {n: [[t, a, c] for t, a, c in kept] for n, kept in sorted(self.entries.items())}}

    def restore(self, document: object) -> int:
        """Take back a ``document()`` (raises LedgerError, changing nothing, for one it cannot use); return the
        entries taken."""
        if not isinstance(document, dict) or document.get("version") != LEDGER_VERSION:
            found = document.get("version") if isinstance(document, dict) else type(document).__name__
            raise LedgerError(f"ledger version {found!r}, not {LEDGER_VERSION}")
        nodes = document.get("nodes")
        if not isinstance(nodes, dict):
            raise LedgerError("ledger has no nodes object")
        entries: dict[str, list[tuple[float, str, str]]] = {}
        for node, kept in nodes.items():
            if not isinstance(node, str) or not isinstance(kept, list):
                raise LedgerError(f"ledger node {str(node)[:80]!r}: not a list of entries")
            rows = []
            for entry in kept:
                if (not isinstance(entry, list) or len(entry) != 3 or not isinstance(entry[0], int | float)
                        or isinstance(entry[0], bool) or entry[1] not in ACTIONS or not isinstance(entry[2], str)):
                    raise LedgerError(f"ledger node {node[:80]!r}: an entry is not [time, action, cause]")
                rows.append((float(entry[0]), str(entry[1]), entry[2][:_MAX_TEXT]))
            if rows:
                entries[node] = sorted(rows)[-self.history:]
        self.entries = entries
        self.changed = False
        return sum(len(kept) for kept in entries.values())
