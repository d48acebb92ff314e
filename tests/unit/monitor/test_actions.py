"""The monitor's advisories (docs/actions.md): judged after each analysis into its snapshot, and the
repeat-offender ledger kept beside the stream checkpoint (``<state-file>.ledger``) across a restart."""

from __future__ import annotations

import json
from pathlib import Path

from rainierd.actions.config import ActionConfig
from rainierd.actions.ledger import LEDGER_VERSION
from rainierd.core.config import MonitorConfig
from rainierd.fleet.topology import build_topology
from rainierd.monitor import Monitor
from rainierd.monitor.ledger_file import ledger_path
from tests.helpers import hear
from tests.unit.monitor.test_monitor import tick_messages


def monitor_at(path: Path | None, config: ActionConfig | None = None) -> Monitor:
    """Return a demo-fleet monitor checkpointing at ``path``."""
    return Monitor(build_topology("demo"), MonitorConfig(), checkpoint_file=path, actions=config)


async def analysed(monitor: Monitor) -> None:
    """Analyse one tick of the demo fleet and save the checkpoint."""
    for topic, payload in tick_messages(1)[0]:
        hear(monitor, topic, payload)
    await monitor.analyse_once()
    await monitor.save_checkpoint_now()


class TestSnapshot:
    """Every snapshot carries the tick's advisories."""

    async def test_snapshot_has_the_view_and_totals(self) -> None:
        """A healthy fleet's snapshot has an empty, dry-run view with the configured brake, and zero totals."""
        monitor = monitor_at(None, ActionConfig(brake_max_nodes=7))
        await analysed(monitor)
        snap = monitor.snapshot
        assert snap is not None
        assert snap.actions is not None
        assert snap.action_totals is not None
        assert (snap.actions.dry_run, snap.actions.advisories, snap.actions.brake.max_nodes) == (True, (), 7)
        assert (sum(snap.action_totals.proposed.values()), snap.action_totals.brake_trips) == (0, 0)


class TestLedgerFile:
    """The ledger beside the checkpoint."""

    async def test_a_restart_keeps_the_ledger(self, tmp_path: Path) -> None:
        """A node's flags written by one monitor are the next monitor's, lemon included."""
        path = tmp_path / "streams.npz"
        first = monitor_at(path, ActionConfig(lemon_flags=2))
        for t_s in (1.8e9, 1.8e9 + 600):
            first.actions.ledger.flag("n3", t_s=t_s, action="drain", cause="n3/chip1/link0 down")
        await analysed(first)
        saved = json.loads(ledger_path(path).read_text())
        assert saved["version"] == LEDGER_VERSION
        later = monitor_at(path, ActionConfig(lemon_flags=2))
        later.restore()
        assert later.actions.ledger.record("n3") == first.actions.ledger.record("n3")
        record = later.actions.ledger.record("n3")
        assert record is not None
        assert (record.flagged, record.lemon) == (2, True)

    async def test_an_unusable_ledger_starts_empty(self, tmp_path: Path) -> None:
        """A ledger of another version leaves the ledger empty and the stream checkpoint restored."""
        path = tmp_path / "streams.npz"
        await analysed(monitor_at(path))
        ledger_path(path).write_text(json.dumps({"version": 99, "nodes": {"n1": []}}))
        later = monitor_at(path)
        assert later.restore()
        assert later.actions.ledger.entries == {}

    async def test_written_only_when_changed(self, tmp_path: Path) -> None:
        """A monitor that never flagged a node writes no ledger file."""
        path = tmp_path / "streams.npz"
        await analysed(monitor_at(path))
        assert path.exists()
        assert not ledger_path(path).exists()
