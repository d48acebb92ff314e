"""Detection over the fleet state: NeuronLinks, EFA ports, chips, node cooling
and presence, UltraServer cooling, and the monitor's feed itself.  Pure numpy; one ``update`` per analysis
tick returns the state changes as events.

Each change of state is an ``Event``; the monitor logs it, publishes it under
``rainier/v1/events/<entity>/<id>`` and exports the current unhealthy set.
The detectors know no jobs: ``core/eventjobs.py`` adds the jobs an event's
entity slows once the tick's jobs are priced.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

import numpy as np

from rainierd._types import I64
from rainierd.core.detect._baseline import Learned, take
from rainierd.core.detect._common import Reason, reason_names
from rainierd.core.detect._paths import NEEDS, PathParams
from rainierd.core.detect._stats import PeerSample
from rainierd.core.detect._tracker import StateTracker, Transitions
from rainierd.core.detect.chips import FAILED, HEALTHY, STALE, STRAGGLER, THROTTLED, ChipDetector, ChipParams
from rainierd.core.detect.cooling import CoolingDetector, CoolingParams
from rainierd.core.detect.efa import EfaDetector, EfaParams
from rainierd.core.detect.feed import FeedDetector, FeedParams, FeedView
from rainierd.core.detect.neuronlink import LinkDetector, NeuronLinkParams
from rainierd.core.detect.nodepaths import NodePathDetector, NodePathParams
from rainierd.core.detect.slow_loss import SlowLossParams
from rainierd.core.state import FleetState
from rainierd.fleet import TRN2, Topology, Trainium2
from rainierd.fleet.ids import entity_fields

__all__ = [
    "FAILED",
    "HEALTHY",
    "STALE",
    "STATE_NAMES",
    "STRAGGLER",
    "THROTTLED",
    "ChipParams",
    "CoolingParams",
    "DetectionParams",
    "EfaParams",
    "Event",
    "FeedParams",
    "FeedView",
    "FleetDetector",
    "JobCost",
    "Learned",
    "NeuronLinkParams",
    "NodePathParams",
    "PathParams",
    "PeerSample",
    "Reason",
    "SlowLossParams",
    "reason_names",
    "take",
]

STATE_NAMES: Final[dict[str, tuple[str, ...]]] = {
    "neuronlink": ("healthy", "degraded", "down"),
    "efa": ("healthy", "degraded", "down", "stale"),  # stale: the port's device reported gone (detect/efa.py)
    "chip": ("healthy", "straggler", "throttled", "stale", "failed"),
    # path_degraded: every EFA port or NeuronLink of the node far under its peers' (detect/nodepaths.py); a node
    # shows its cooling's state or loss first, its paths' when its cooling is healthy.
    "node": ("healthy", "cooling_degraded", "lost", "path_degraded"),
    "ultraserver": ("healthy", "cooling_degraded"),
    "feed": ("healthy", "lost"),  # one entity: this monitor's (or shard's) telemetry feed (detect/feed.py)
}


@dataclass(frozen=True, slots=True, kw_only=True)
class DetectionParams:
    """Every detector's thresholds, each detector's in its own class."""

    neuronlink: NeuronLinkParams = field(default_factory=NeuronLinkParams)
    efa: EfaParams = field(default_factory=EfaParams)
    slow_loss: SlowLossParams = field(default_factory=SlowLossParams)
    chips: ChipParams = field(default_factory=ChipParams)
    cooling: CoolingParams = field(default_factory=CoolingParams)
    feed: FeedParams = field(default_factory=FeedParams)
    node_paths: NodePathParams = field(default_factory=NodePathParams)


_NODE_PATH_DEGRADED: Final = STATE_NAMES["node"].index("path_degraded")


class JobCost(NamedTuple):
    """A job an unhealthy entity slows, and the FLOP/s the job model charges the entity for it."""

    job: str  # the job's id, as its document gives it
    flops: float


@dataclass(frozen=True, slots=True)
class Event:
    """One change of an entity's health state, and the jobs the entity slows (``core/eventjobs.py``: empty
    on a clear, for an entity in no job, and until the jobs are added)."""

    tick: int
    entity: str
    id: int  # the fleet-wide index of the entity (as plain data: ``index``; ``id`` is its canonical name there)
    before: str
    after: str
    reasons: tuple[str, ...]
    onset_tick: int
    jobs: tuple[JobCost, ...] = ()  # the costliest first

    @property
    def raised(self) -> bool:
        """Return True for a new detection (from healthy), not an escalation or a clear."""
        return self.before == "healthy"

    def as_dict(self, topology: Topology) -> dict[str, Any]:
        """Return the event as plain data (log fields, MQTT payload, ``/api/v1/events``), its entity named as
        every surface names it (``fleet/ids.py``: ``id`` the canonical string, ``index`` this event's ``id``,
        its ``ultraserver``, ``node`` and ``hostname`` where they apply)."""
        return {"tick": self.tick} | entity_fields(topology, self.entity, self.id) | {
            "before": self.before, "after": self.after, "reasons": list(self.reasons), "onset_tick": self.onset_tick,
            "jobs": [{"job": j.job, "flops": j.flops} for j in self.jobs]}


class FleetDetector:
    """All detectors over one fleet state."""

    def __init__(
        self, state: FleetState, *, hardware: Trainium2 = TRN2, params: DetectionParams | None = None,
    ) -> None:
        self.state = state
        self.hardware = hardware
        self.params = params or DetectionParams()
        self.links = LinkDetector(state, self.params.neuronlink, hardware)
        self.efa = EfaDetector(state, self.params.efa, self.params.slow_loss)
        self.chips = ChipDetector(state, hardware.fp8_dense_flops, self.params.chips)
        self.cooling = CoolingDetector(state, self.params.cooling)
        self.feed = FeedDetector(state, self.params.feed)
        self.node_paths = NodePathDetector(state, self.params.node_paths)
        self._node_state = np.zeros(state.topology.n_nodes, np.int8)  # the node entity's state at the last update

    def trackers(self) -> dict[str, StateTracker]:
        """Return the state tracker of every entity kind (the node's: a view of its two trackers, ``_nodes``)."""
        return {"neuronlink": self.links.tracker, "efa": self.efa.tracker, "chip": self.chips.tracker,
                "node": self._nodes(), "ultraserver": self.cooling.ultraservers, "feed": self.feed.tracker}

    def _nodes(self) -> StateTracker:
        """Return the node entity's states: its cooling tracker's (cooling degraded, lost) where not healthy, else
        ``path_degraded`` where its paths' tracker says so; reasons of both, the earlier onset (a copy)."""
        cooling, paths = self.cooling.nodes, self.node_paths.tracker
        state = np.where(cooling.state > 0, cooling.state,
                         np.where(paths.state > 0, np.int8(_NODE_PATH_DEGRADED), np.int8(0))).astype(np.int8)
        onset = np.where(cooling.state > 0, cooling.onset, paths.onset)
        both = (cooling.state > 0) & (paths.state > 0)
        np.copyto(onset, np.minimum(cooling.onset, paths.onset), where=both)
        return StateTracker(cooling.raise_after_s, cooling.clear_after_s, state, cooling.reason | paths.reason, onset,
                            cooling.bad_ticks, cooling.bad_s, cooling.good_s)

    def _node_changes(self, view: StateTracker) -> Transitions:
        """Return the node entity's changes since the last update (its two trackers' changes, merged)."""
        before = self._node_state
        changed = np.flatnonzero(view.state != before)
        out = Transitions(changed, before[changed].astype(np.int64), view.state[changed].astype(np.int64))
        self._node_state = view.state.copy()
        return out

    def update(self, tick: int, *, node_group: I64 | None = None) -> list[Event]:
        """Run every detector on the state as it is now; return the events, worst last.

        ``node_group`` is each node's job (-1: none; None: jobs unknown): a node's paths and its chips are judged
        against its job's, else its UltraServer's (``_peers.py``).
        """
        topo, chips = self.state.topology, self.state.chips
        stale = self.state.silent(chips, self.params.chips.stale_after_s)
        # The feed first: nodes whose silence is its loss's are held back from the node and chip judgements.
        feed, hold = self.feed.update(
            tick, node_rx_s=np.fmax.reduce(chips.rx_s.reshape(topo.n_nodes, -1), axis=1),
            node_silent=np.asarray(stale.reshape(topo.n_nodes, -1).all(axis=1), dtype=bool),
            node_lost=self.cooling.lost_nodes(),
            node_stale_s=self.state.node_stale_after_s(self.params.chips.stale_after_s),
            node_period_s=self.state.node_cadence.period_s,
        )
        held_chips = hold[topo.chip_node] if hold.any() else None
        if held_chips is not None:
            stale = stale & ~held_chips
        _, ultraservers = self.cooling.update(tick, chip_stale=stale)
        lost_chips = self.cooling.lost_nodes()[topo.chip_node]
        if held_chips is not None:
            lost_chips |= held_chips
        links, ports = self.links.update(tick), self.efa.update(tick)
        self.node_paths.update(tick, {"efa": self.efa.node_signal, "neuronlink": self.links.node_signal},
                               node_group=node_group)
        trackers = self.trackers()
        changes = {
            "neuronlink": links,
            "efa": ports,
            "chip": self.chips.update(tick, suppress_stale=lost_chips, node_group=node_group),
            "node": self._node_changes(trackers["node"]),
            "ultraserver": ultraservers,
            "feed": feed,
        }
        events = []
        for entity, change in changes.items():
            events.extend(self._events(entity, change, trackers[entity], tick))
        return events

    @staticmethod
    def _events(entity: str, change: Transitions, tracker: StateTracker, tick: int) -> list[Event]:
        names = STATE_NAMES[entity]
        out = []
        for i, before, after in zip(change.ids.tolist(), change.before.tolist(), change.after.tolist(), strict=True):
            reasons = tuple(reason_names(int(tracker.reason[i]))) if after else ()
            onset = int(tracker.onset[i]) if after else tick
            out.append(Event(tick, entity, i, names[before], names[after], reasons, onset))
        return out

    def unknown(self) -> dict[tuple[str, str], int]:
        """Return, per (entity kind, judgement), how many entities cannot be judged yet.

        An entity is unknown for a judgement until a sample has carried what
        that judgement needs: never heard from, or heard from by a publisher
        that lacks the fields (AWS neuron-monitor has no clock, NeuronLink or
        EFA figures).  Unknown is neither healthy nor unhealthy.
        """
        state, topo = self.state, self.state.topology
        chips, air = state.chips, state.cooling
        node = topo.node_present  # an id the inventory leaves empty is not a node to judge
        every_node = bool(node.all())

        def count(judgeable: np.ndarray) -> int:
            # A node's entities are one run of ids (topology.py): its rows, without a gather over millions.
            rows = judgeable.reshape(topo.n_nodes, -1)
            kept = rows if every_node else rows[node]
            return int(kept.size - np.count_nonzero(kept))

        return {
            ("neuronlink", "health"): count(state.links.has(*NEEDS["neuronlink"])),
            ("efa", "health"): count(state.efa.has(*NEEDS["efa"])),
            ("chip", "stale"): count(chips.reported()),
            ("chip", "failed"): count(chips.has("ecc_uncorrected_total")),
            ("chip", "throttled"): count(chips.has("throttled") | chips.has("clock_ratio")),
            # By efficiency against its peers: a clock is used where its group reports one, never needed.
            ("chip", "straggler"): count(chips.has("util", "fp8_flop_total")),
            ("chip", "errors"): count(chips.has("exec_errors_total", "exec_timeouts_total")),
            ("node", "cooling"): count(air.has("inlet_c") | air.has("fan_rpm")),
            # Against its peers: fewer than min_peers with a figure (detect/nodepaths.py), or no figure of its own.
            **{("node", f"{name}_paths"): n for name, n in self.node_paths.unknown(node).items()},
        }

    def implausible(self) -> dict[tuple[str, str], I64]:
        """Return, per (entity kind, judgement), the entities whose claim is implausible now: far above their
        peers', so left out of every peer's reference (detect/nodepaths.py)."""
        return {("node", f"{name}_paths"): ids for name, ids in self.node_paths.implausible().items()}

    def implausible_onsets(self) -> dict[tuple[str, str], int]:
        """Return, per (entity kind, judgement), how many times an entity became implausible since the start."""
        return {("node", f"{name}_paths"): n for name, n in self.node_paths.implausible_onsets().items()}

    def unhealthy(self) -> dict[str, np.ndarray]:
        """Return, per entity kind, the ids that are not healthy now."""
        return {entity: np.flatnonzero(t.state) for entity, t in self.trackers().items()}
