"""What the monitor has learned about its fleet, as named arrays, so a restart
costs no learning: every detector's per-entity baselines (NeuronLink bandwidth
and latency, EFA traffic share and latency, each EFA port's retransmit rate and
each site's background, each chip's efficiency) and each group's and node's
healthy share of peak.  The monitor's checkpoint saves them beside its
sequence accounting (``monitor/checkpointing.py``) and a restarted monitor
takes them back.

What is not here is relearned in seconds: CUSUM sums and state trackers
(evidence and persistence, which a restart must not carry into a raise
without an event), EWMAs of the last few samples, and cooling (its trends
are of the last 5-20 s; its temperature waits a minute for its load to be
learned again, ``detect/cooling.py``).

The arrays carry their layout's version and the fingerprint of the topology
they were learned on; ``restore`` refuses, with the reason, arrays of another
version, another topology, or any array that does not fit, and then changes
nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt

from rainierd.core.detect import Learned, take
from rainierd.errors import RainierdError
from rainierd.fleet import Topology

if TYPE_CHECKING:
    from rainierd.core.analysis import MonitorCore

# 1: the first layout (issue 22): baselines, slow-loss rates and site backgrounds, healthy shares.
# 2: each port's retransmit rate also holds the window it keeps back until the next one ends clean
#    (``RateBaseline.held_*``): a layout-1 file lacks them and is refused as another layout.
# 3: one healthy share per node for every group (issue 34: jobs and capacity in no job priced alike), where
#    layout 2 kept one per UltraServer and one per node under jobs.
# 4: each port's retransmit rate is per packet sent (``RateBaseline.exposure``), each site's background per
#    packet with its ports' traffic (issue 38: retransmits follow traffic); a layout-3 rate is per second.
VERSION: Final = 4
_VERSION_KEY: Final = "version"
_TOPOLOGY_KEY: Final = "topology"


class LearnedStateError(RainierdError):
    """Learned arrays that cannot be taken back: another layout, another topology, or arrays that do not fit."""


def fingerprint(topology: Topology) -> str:
    """Return a digest of what numbers the fleet's entities: the same digest, the same entity behind each id."""
    digest = hashlib.sha256()
    digest.update(repr((topology.n_sites, topology.efa_ports_per_node, topology.chips_per_node,
                        topology.nodes_per_ultraserver, topology.links_per_node)).encode())
    for array in (topology.ultraserver_site, topology.node_ultraserver, topology.chip_node, topology.link_a,
                  topology.link_b, topology.link_kind, topology.link_node, topology.efa_chip, topology.efa_node,
                  topology.node_present):
        digest.update(np.ascontiguousarray(array).view(np.uint8).tobytes())
    names = topology.names
    digest.update(repr((names.sites, names.ultraservers, names.hostnames, names.instance_ids)).encode())
    return digest.hexdigest()


def _parts(core: MonitorCore) -> dict[str, Learned]:
    """Return every baseline the core learns, by the name its arrays are saved under."""
    detector = core.detector
    return {
        "neuronlink.bandwidth": detector.links.bw_base,
        "neuronlink.latency": detector.links.latency_base,
        "efa.share": detector.efa.share_base,
        "efa.latency": detector.efa.latency_base,
        "chip.efficiency": detector.chips.baseline,
    }


def learned_arrays(core: MonitorCore, *, topology_fingerprint: str) -> dict[str, npt.NDArray[Any]]:
    """Return copies of everything ``core`` has learned, by name, with the layout's version and the topology's
    fingerprint (``fingerprint(core.topology)``, passed in: it hashes the whole topology)."""
    out: dict[str, npt.NDArray[Any]] = {_VERSION_KEY: np.array(VERSION), _TOPOLOGY_KEY: np.array(topology_fingerprint)}
    for part, learned in _parts(core).items():
        out |= {f"{part}.{name}": value for name, value in learned.arrays().items()}
    out |= {f"efa.slow_loss.{name}": value for name, value in core.detector.efa.slow_loss.arrays().items()}
    out["neuronlink.share_ref"] = core.detector.links.share_ref.copy()
    out["model.node_shares"] = core.node_shares.share.copy()
    return out


def _within(arrays: Mapping[str, npt.NDArray[Any]], prefix: str) -> dict[str, npt.NDArray[Any]]:
    return {name.removeprefix(prefix): value for name, value in arrays.items() if name.startswith(prefix)}


def _check_values(arrays: Mapping[str, npt.NDArray[Any]]) -> None:
    """Raise LearnedStateError for a value no monitor learns: an infinity, or a negative count or duration."""
    for name, value in arrays.items():
        if value.dtype.kind != "f":
            continue
        if np.isinf(value).any():
            raise LearnedStateError(f"{name}: an infinite value")
        if name.rsplit(".", 1)[-1] in {"history_s", "count", "seconds", "pending_count", "pending_seconds",
                                       "background_s", "held_seconds", "exposure", "pending_exposure",
                                       "held_exposure", "site_packets_per_s"} and (value < 0).any():
            raise LearnedStateError(f"{name}: a negative count or duration")


def restore_learned(core: MonitorCore, arrays: Mapping[str, npt.NDArray[Any]], *, topology_fingerprint: str) -> None:
    """Take back ``learned_arrays``' arrays into ``core``.

    All or nothing: raises LearnedStateError, saying why and changing
    nothing, for arrays of another layout version, learned on another
    topology, or any array that does not fit this core's.
    """
    version = arrays.get(_VERSION_KEY)
    if version is None or version.shape != () or version.dtype.kind not in "iu" or int(version) != VERSION:
        shown = None if version is None else version.tolist()
        raise LearnedStateError(f"learned state of layout {shown!r}, this monitor reads layout {VERSION}")
    theirs = arrays.get(_TOPOLOGY_KEY)
    if theirs is None or theirs.shape != () or str(theirs) != topology_fingerprint:
        raise LearnedStateError("learned on another topology (its fingerprint differs): the ids name other "
                                "entities")
    _check_values(arrays)
    # Every array is checked first, so a misfit anywhere changes nothing.
    parts = _parts(core)
    slow_loss, links = core.detector.efa.slow_loss, core.detector.links
    slow_loss_arrays = _within(arrays, "efa.slow_loss.")
    try:
        for part, learned in parts.items():
            learned.check(_within(arrays, f"{part}."))
        slow_loss.check(slow_loss_arrays)
        share_ref = take(arrays, "neuronlink.share_ref", links.share_ref)
        shares = take(arrays, "model.node_shares", core.node_shares.share)
    except ValueError as exc:
        raise LearnedStateError(f"an array does not fit this monitor's: {exc}") from None
    for part, learned in parts.items():
        learned.load(_within(arrays, f"{part}."))
    slow_loss.load(slow_loss_arrays)
    links.share_ref, core.node_shares.share = share_ref, shares
