"""Specification of the checkpoint that carries sequence accounting across a
monitor restart: frames published while no monitor listened are counted lost
exactly once, and a checkpoint that does not fit is refused, never half used."""

from __future__ import annotations

import array
import asyncio
import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from harness.readonly import read_only
from harness.waits import wait_until
from rainierd.core import Ingest
from rainierd.core.config import MonitorConfig
from rainierd.core.ingest import COUNTERS
from rainierd.core.streams import WINDOW
from rainierd.exporter import build_registry
from rainierd.exporter.selfstatus import CheckpointCollector, IngestCollector
from rainierd.fleet.topology import build_topology
from rainierd.monitor import Monitor
from rainierd.monitor.checkpoint_file import CheckpointError, load_checkpoint, save_checkpoint
from rainierd.monitor.snapshot import MonitorSnapshot
from tests.helpers import hear
from tests.unit.core.test_core import Fleet
from tests.unit.monitor.test_monitor import tick_messages

FLEET = "demo: 8 nodes, 1 sites"
_FS_IOC_GETFLAGS, _FS_IOC_SETFLAGS, _FS_IMMUTABLE_FL = 0x80086601, 0x40086602, 0x10


@contextlib.contextmanager
def no_new_names(directory: Path) -> Iterator[None]:
    """Make ``directory`` refuse to create, rename or remove entries (its files stay writable), as a read-only
    state volume does: immutable for root (whom permissions do not stop), mode 0555 for anyone else."""
    if os.geteuid() != 0:
        directory.chmod(0o555)
        try:
            yield
        finally:
            directory.chmod(0o755)
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        flags = array.array("i", [0])
        fcntl.ioctl(fd, _FS_IOC_GETFLAGS, flags, True)
        fcntl.ioctl(fd, _FS_IOC_SETFLAGS, array.array("i", [flags[0] | _FS_IMMUTABLE_FL]))
        try:
            yield
        finally:
            fcntl.ioctl(fd, _FS_IOC_SETFLAGS, flags)
    finally:
        os.close(fd)


def feed(monitor: Monitor, messages: list[tuple[str, bytes]]) -> None:
    for topic, payload in messages:
        hear(monitor, topic, payload)


def restored(path: Path) -> Monitor:
    """A new monitor started from the checkpoint at ``path``."""
    monitor = Monitor(build_topology("demo"), MonitorConfig(), checkpoint_file=path)
    assert monitor.restore()
    return monitor


def run_ticks(fleet: Fleet, n: int) -> None:
    for _ in range(n):
        fleet.feed(fleet.frames()[1])


def unheard(fleet: Fleet, n: int) -> None:
    """``n`` ticks published while no monitor listens."""
    for _ in range(n):
        fleet.frames()


class TestAcrossARestart:
    def test_frames_published_while_down_are_lost_exactly_once(self) -> None:
        """10 ticks applied, a checkpoint, 7 ticks nobody hears, a new monitor from the checkpoint, 2 * WINDOW
        ticks: it counts exactly the 7 ticks of every node lost, and applied + lost is every frame published."""
        fleet = Fleet()
        run_ticks(fleet, 10)
        saved = fleet.ingest.checkpoint()
        fleet.ingest = Ingest(fleet.state, fleet.stats.__class__())  # the monitor restarts
        fleet.stats = fleet.ingest.stats
        fleet.ingest.restore(saved)
        unheard(fleet, 7)
        run_ticks(fleet, 2 * WINDOW)

        nodes = fleet.topo.n_nodes
        assert fleet.stats.frames_lost == 7 * nodes
        assert fleet.stats.frames_missing == 0
        assert fleet.stats.frames_applied + fleet.stats.frames_lost == (10 + 7 + 2 * WINDOW) * nodes
        assert fleet.stats.publisher_changes == 0

    def test_a_fresh_monitor_without_checkpoint_cannot_see_the_loss(self) -> None:
        """The control: without the checkpoint, the same silence is invisible (a new stream starts anywhere)."""
        fleet = Fleet()
        run_ticks(fleet, 10)
        fleet.ingest = Ingest(fleet.state, fleet.stats.__class__())
        fleet.stats = fleet.ingest.stats
        unheard(fleet, 7)
        run_ticks(fleet, 2 * WINDOW)
        assert fleet.stats.frames_lost == 0

    def test_a_checkpoint_of_another_fleet_is_refused_and_changes_nothing(self) -> None:
        """A rainier-sized checkpoint does not fit a demo monitor: ValueError, and its state is as it was."""
        big = Fleet("sites=1,ultraservers=4")
        run_ticks(big, 2)
        small = Fleet()
        run_ticks(small, 3)
        seq_before = small.ingest.checkpoint()["nodes.seq"].copy()
        with pytest.raises(ValueError, match="does not fit"):
            small.ingest.restore(big.ingest.checkpoint())
        assert np.array_equal(small.ingest.checkpoint()["nodes.seq"], seq_before)
        assert small.stats.frames_applied == 3 * small.topo.n_nodes

    def test_the_counters_travel_with_the_streams(self) -> None:
        fleet = Fleet()
        run_ticks(fleet, 4)
        restored = Fleet()
        restored.ingest.restore(fleet.ingest.checkpoint())
        assert restored.stats.frames_applied == fleet.stats.frames_applied == 4 * fleet.topo.n_nodes


class TestFile:
    def test_round_trip(self, tmp_path: Path) -> None:
        fleet = Fleet()
        run_ticks(fleet, 3)
        path = tmp_path / "streams.npz"
        save_checkpoint(path, fleet.ingest.checkpoint(), fleet=FLEET)
        arrays = load_checkpoint(path, fleet=FLEET)
        assert arrays is not None
        other = Ingest(Fleet().state, Fleet().stats)
        other.restore(arrays)
        assert not list(tmp_path.glob(".*.tmp"))  # the temporary name was renamed over

    def test_no_file_is_no_checkpoint(self, tmp_path: Path) -> None:
        assert load_checkpoint(tmp_path / "absent.npz", fleet=FLEET) is None

    @pytest.mark.parametrize(("content", "reason"), [
        (b"", "not a checkpoint"),
        (b"garbage that is not a zip file at all", "not a checkpoint"),
    ])
    def test_a_corrupt_file_is_refused(self, tmp_path: Path, content: bytes, reason: str) -> None:
        path = tmp_path / "streams.npz"
        path.write_bytes(content)
        with pytest.raises(CheckpointError, match=reason):
            load_checkpoint(path, fleet=FLEET)

    def test_a_truncated_file_is_refused(self, tmp_path: Path) -> None:
        fleet = Fleet()
        run_ticks(fleet, 2)
        path = tmp_path / "streams.npz"
        save_checkpoint(path, fleet.ingest.checkpoint(), fleet=FLEET)
        path.write_bytes(path.read_bytes()[:200])
        with pytest.raises(CheckpointError):
            load_checkpoint(path, fleet=FLEET)

    def test_a_file_of_the_positional_layout_is_refused_and_the_monitor_starts_afresh(self, tmp_path: Path) -> None:
        """A format-1 file (one positional counters array) is refused by its format; a monitor starts afresh."""
        fleet = Fleet()
        run_ticks(fleet, 2)
        arrays = fleet.ingest.checkpoint()
        counters = np.array([int(arrays.pop(f"counters.{name}")) for name in COUNTERS], np.int64)
        path = tmp_path / "streams.npz"
        np.savez(path, _format=np.array(1), _fleet=np.array(FLEET), counters=counters, **arrays)
        with pytest.raises(CheckpointError, match="format 1, not 2"):
            load_checkpoint(path, fleet=FLEET)
        monitor = Monitor(build_topology("demo"), MonitorConfig(), checkpoint_file=path)
        assert not monitor.restore()
        assert monitor.core.stats.frames_applied == 0

    def test_another_fleets_file_is_refused(self, tmp_path: Path) -> None:
        path = tmp_path / "streams.npz"
        save_checkpoint(path, Fleet().ingest.checkpoint(), fleet=FLEET)
        with pytest.raises(CheckpointError, match="saved for fleet"):
            load_checkpoint(path, fleet="rainier: 7800 nodes, 1 sites")


class TestRefusedWhole:
    """A checkpoint that does not fit changes nothing at all (it is checked before anything is taken)."""

    @staticmethod
    def broken(mutate: str) -> tuple[Fleet, dict[str, np.ndarray]]:
        source = Fleet()
        run_ticks(source, 3)
        arrays = source.ingest.checkpoint()
        if mutate == "float counters":
            arrays["counters.frames_lost"] = np.array(np.nan)
        elif mutate == "text counters":
            arrays["counters.frames_applied"] = np.array("a")
        elif mutate == "a counter below zero":
            arrays["counters.publisher_changes"] = np.array(-1, np.int64)
        elif mutate == "a counter that is not one number":
            arrays["counters.frames_late"] = np.array([1, 2], np.int64)
        elif mutate == "publisher below -1":
            arrays["nodes.publisher"][0] = -5
        elif mutate == "publisher beyond the table":
            arrays["nodes.publisher"][0] = 7
        elif mutate == "names listed twice":
            arrays["publishers.utf8"] = np.frombuffer(b"simsim", np.uint8).copy()
            arrays["publishers.len"] = np.array([3, 3])
        elif mutate == "lengths that do not add up":
            arrays["publishers.len"] = np.array([99])
        elif mutate == "not UTF-8":
            arrays["publishers.utf8"] = np.frombuffer(b"\xff\xfe\xfd", np.uint8).copy()
        elif mutate == "counters missing":
            del arrays["counters.frames_lost"]
        elif mutate == "the positional layout":
            counters = [int(arrays.pop(f"counters.{name}")) for name in COUNTERS]
            arrays["counters"] = np.array(counters, np.int64)
        target = Fleet()
        run_ticks(target, 2)
        return target, arrays

    @pytest.mark.parametrize("mutate", [
        "float counters", "text counters", "publisher below -1", "publisher beyond the table", "names listed twice",
        "lengths that do not add up", "not UTF-8", "counters missing", "a counter below zero",
        "a counter that is not one number", "the positional layout",
    ])
    def test_refused_and_nothing_changes(self, mutate: str) -> None:
        target, arrays = self.broken(mutate)
        before = target.ingest.checkpoint()
        with pytest.raises(ValueError):  # noqa: PT011 - the reason varies; what matters is that nothing changed
            target.ingest.restore(arrays)
        after = target.ingest.checkpoint()
        assert before.keys() == after.keys()
        assert all(np.array_equal(before[k], after[k], equal_nan=before[k].dtype.kind == "f") for k in before)

    def test_a_publisher_id_ending_in_nul_survives_the_round_trip(self) -> None:
        """Binary frames may carry any UTF-8 publisher id; a numpy string array would drop trailing NULs, and the
        restored stream would then see a publisher change on its next frame."""
        fleet = Fleet()
        frames = [(t, replace(f, publisher="agg\0")) for t, f in fleet.frames()[1]]
        fleet.feed(frames)
        restored = Fleet()
        restored.ingest.restore(fleet.ingest.checkpoint())
        restored.model, restored.tick = fleet.model, fleet.tick
        result = restored.feed([(t, replace(f, publisher="agg\0")) for t, f in restored.frames()[1]])
        assert (result.applied, result.publisher_changes) == (8, 0)


class TestMonitorSaves:
    async def test_a_checkpoint_that_cannot_be_written_is_counted_and_the_stale_one_removed(
        self, tmp_path: Path,
    ) -> None:
        """A write that fails leaves no older checkpoint behind (a restart from it would take back counters lower
        than those exported and count frames applied since as lost), counts the failure and keeps the monitor going;
        the next write that works puts a fresh one back."""
        path = tmp_path / "streams.npz"
        monitor = Monitor(build_topology("demo"), MonitorConfig(),
                          checkpoint_file=path)
        await monitor.save_checkpoint_now()
        assert (path.exists(), monitor.checkpointer.saves, monitor.checkpointer.failures) == (True, 1, 0)
        blocker = tmp_path / ".streams.npz.tmp"
        blocker.mkdir()  # the temporary file cannot be created
        await monitor.save_checkpoint_now()
        assert (path.exists(), monitor.checkpointer.failures) == (False, 1)
        blocker.rmdir()
        await monitor.save_checkpoint_now()
        assert (path.exists(), monitor.checkpointer.saves) == (True, 2)

    async def test_a_checkpoint_that_could_not_be_replaced_is_marked_and_never_restored_later(
        self, tmp_path: Path,
    ) -> None:
        """The state directory takes no new name mid-run (its file still writable), so a save fails and the last
        checkpoint cannot be removed: it is marked stale in place, the counters carry on being exported (no start
        takes the mark back), and the next start (the directory writable again) starts afresh instead of taking
        back older counters (seen before 2026-12-01: counters back from 351 to 234, 117 applied frames lost
        again)."""
        state = tmp_path / "state"
        state.mkdir()
        path = state / "streams.npz"
        monitor = Monitor(build_topology("demo"), MonitorConfig(), checkpoint_file=path)
        ticks = tick_messages(2)
        feed(monitor, ticks[0])
        await monitor.analyse_once()
        with no_new_names(state):
            feed(monitor, ticks[1])
            shown = scraped(await monitor.analyse_once())
            assert (monitor.checkpointer.saves, monitor.checkpointer.failures, path.exists()) == (1, 1, True)
        assert (shown["rainier_ingest_frames_applied_total"], shown["rainier_monitor_checkpoint_stale"]) == (18, 0)
        later = Monitor(build_topology("demo"), MonitorConfig(), checkpoint_file=path)
        assert later.restore() is False
        assert later.core.stats.frames_applied == 0

    async def test_a_checkpoint_in_a_directory_that_takes_no_new_file_is_taken_back_then_marked(
        self, tmp_path: Path,
    ) -> None:
        """A good checkpoint in a directory that takes no new name at start (its file writable): the counters carry
        on from it, the first save that fails marks it stale, and the start after that begins afresh."""
        state = tmp_path / "state"
        state.mkdir()
        path = state / "streams.npz"
        ticks = tick_messages(2)
        monitor = Monitor(build_topology("demo"), MonitorConfig(), checkpoint_file=path)
        feed(monitor, ticks[0])
        await monitor.analyse_once()
        with no_new_names(state):
            second = restored(path)
            feed(second, ticks[1])
            shown = scraped(await second.analyse_once())
        assert (shown["rainier_ingest_frames_applied_total"], shown["rainier_monitor_checkpoint_stale"]) == (18, 0)
        assert Monitor(build_topology("demo"), MonitorConfig(), checkpoint_file=path).restore() is False

    async def test_a_stop_records_the_frames_received_but_not_yet_analysed(self, tmp_path: Path) -> None:
        """A tick analysed, the next received, then the stop: the checkpoint holds both ticks' frames, so the next
        run counts on from them (a stream first heard in that last window would otherwise be first heard by the
        next run, and its earlier frames would be outside the accounting: seen in CI as 9-23 frames short)."""
        path = tmp_path / "streams.npz"
        monitor = Monitor(build_topology("demo"), MonitorConfig(tick_s=60.0), checkpoint_file=path)
        ticks = tick_messages(2)
        feed(monitor, ticks[0])
        analysing = asyncio.create_task(monitor.analyse())
        await wait_until(lambda: monitor.checkpointer.saves == 1, 10, "the first analysis and save")
        feed(monitor, ticks[1])  # a minute before the next analysis is due
        analysing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await analysing
        assert (monitor.core.stats.frames_applied, monitor.checkpointer.saves) == (18, 2)
        assert restored(path).core.stats.frames_applied == 18

    async def test_a_stop_during_an_analysis_records_it_before_saving(self, tmp_path: Path) -> None:
        """Cancelled while its analysis runs in a thread (which runs on regardless, advancing the streams), the
        monitor waits for it and records its counts: the checkpoint saved on the way out is consistent."""
        path = tmp_path / "streams.npz"
        monitor = Monitor(build_topology("demo"), MonitorConfig(tick_s=60.0), checkpoint_file=path)
        feed(monitor, tick_messages(1)[0])
        analysing = asyncio.create_task(monitor.analyse())
        await asyncio.sleep(0)  # the analysis is handed to its thread
        assert monitor.checkpointer.saves == 0
        analysing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await analysing
        assert restored(path).core.stats.frames_applied == monitor.core.stats.frames_applied == 9

    def test_an_unusable_file_is_ignored_at_start(self, tmp_path: Path) -> None:
        """A monitor given a corrupt checkpoint starts afresh instead of failing to start."""
        path = tmp_path / "streams.npz"
        path.write_bytes(b"PK\x03\x04 not really a zip")
        monitor = Monitor(build_topology("demo"), MonitorConfig(),
                          checkpoint_file=path)
        assert monitor.restore() is False
        assert monitor.core.stats.frames_applied == 0


ACCOUNTED = ("applied_total", "lost_total", "missing", "late_total")


def scraped(snapshot: MonitorSnapshot) -> dict[str, float | None]:
    """What a scrape of ``snapshot`` shows of the sequence accounting (None: no such series) and of the
    checkpoint's staleness."""
    registry = build_registry({"ingest": IngestCollector(lambda: snapshot),
                               "checkpoint": CheckpointCollector(lambda: snapshot)}, process_metrics=False).registry
    names = [f"rainier_ingest_frames_{name}" for name in ACCOUNTED]
    names += ["rainier_ingest_publisher_changes_total", "rainier_ingest_publisher_restarts_total",
              "rainier_monitor_checkpoint_stale"]
    return {name: registry.get_sample_value(name) for name in names}


def assert_never_back(scrapes: list[dict[str, float | None]]) -> None:
    """Assert that no series of the accounting ever shows a value below one it showed before (a counter that
    goes back reads as a reset to Prometheus, which then counts it all again)."""
    for name in scrapes[0]:
        if name.endswith("_total"):
            shown = [s[name] for s in scrapes if s[name] is not None]
            assert shown == sorted(shown), (name, [s[name] for s in scrapes])


class TestReadOnlyStateDirectory:
    """A state directory in which the checkpoint can be neither replaced, removed nor written (a read-only volume,
    harness/readonly.py): whatever a later start takes back, no counter a scrape showed goes back, and applied +
    lost + missing is every frame published (issue 35: counters back and 117 frames counted twice)."""

    @staticmethod
    async def run(monitor: Monitor, ticks: list[list[tuple[str, bytes]]]) -> list[dict[str, float | None]]:
        scrapes = []
        for messages in ticks:
            feed(monitor, messages)
            snapshot = await monitor.analyse_once()  # saves the checkpoint before it publishes the snapshot
            await monitor.save_checkpoint_now()  # and again: the only save before 2026-12-06 (the test then fails)
            scrapes.append(scraped(snapshot))
        return scrapes

    async def test_read_only_mid_run(self, tmp_path: Path) -> None:
        """A checkpoint written, then the volume turns read-only for two ticks and the monitor stops; the next start
        (writable) takes the checkpoint back: no counter goes back, because the two ticks' counts were withheld,
        and every frame is applied, lost or missing (on main: applied shown 27, then 18 after the restart)."""
        state = tmp_path / "state"
        state.mkdir()
        path = state / "streams.npz"
        ticks = tick_messages(4)
        first = Monitor(build_topology("demo"), MonitorConfig(), checkpoint_file=path)
        scrapes = await self.run(first, ticks[:1])
        with read_only(state):
            scrapes += await self.run(first, ticks[1:3])
        later = Monitor(build_topology("demo"), MonitorConfig(), checkpoint_file=path)
        assert later.restore()
        scrapes += await self.run(later, ticks[3:])
        assert_never_back(scrapes)
        last = scrapes[-1]
        assert sum(last[f"rainier_ingest_frames_{name}"] or 0 for name in ACCOUNTED) == 4 * 9
        assert [s["rainier_monitor_checkpoint_stale"] for s in scrapes] == [0, 1, 1, 0]
        assert [s["rainier_ingest_frames_applied_total"] for s in scrapes] == [9, None, None, 18]

    async def test_read_only_at_start(self, tmp_path: Path) -> None:
        """A checkpoint written by one run, then a run on the read-only volume for three ticks, then a start on the
        writable one: no counter goes back and every frame is applied, lost or missing (on main: the read-only run
        showed applied up to 27, the next start 18)."""
        state = tmp_path / "state"
        state.mkdir()
        path = state / "streams.npz"
        ticks = tick_messages(5)
        scrapes = await self.run(Monitor(build_topology("demo"), MonitorConfig(), checkpoint_file=path), ticks[:1])
        with read_only(state):
            second = Monitor(build_topology("demo"), MonitorConfig(), checkpoint_file=path)
            second.restore()
            scrapes += await self.run(second, ticks[1:4])
        later = Monitor(build_topology("demo"), MonitorConfig(), checkpoint_file=path)
        assert later.restore()
        scrapes += await self.run(later, ticks[4:])
        assert_never_back(scrapes)
        assert sum(scrapes[-1][f"rainier_ingest_frames_{name}"] or 0 for name in ACCOUNTED) == 5 * 9
        assert [s["rainier_ingest_frames_applied_total"] for s in scrapes] == [9, None, None, None, 18]

    async def test_a_save_that_works_again_shows_the_counters_again(self, tmp_path: Path) -> None:
        """Read-only for one tick, writable again: the next save holds everything applied since, and the counters
        shown carry on from it, every frame applied."""
        state = tmp_path / "state"
        state.mkdir()
        path = state / "streams.npz"
        ticks = tick_messages(3)
        monitor = Monitor(build_topology("demo"), MonitorConfig(), checkpoint_file=path)
        scrapes = await self.run(monitor, ticks[:1])
        with read_only(state):
            scrapes += await self.run(monitor, ticks[1:2])
        scrapes += await self.run(monitor, ticks[2:])
        assert [(s["rainier_ingest_frames_applied_total"], s["rainier_monitor_checkpoint_stale"]) for s in scrapes] \
            == [(9, 0), (None, 1), (27, 0)]
        assert restored(path).core.stats.frames_applied == 27
