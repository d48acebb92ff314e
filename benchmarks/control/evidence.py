"""The evidence that fired: for each raise of the control campaign, the values
its detector judged, read from the detector's public per-entity arrays right
after the analysis that raised it.

The core exposes a raise's reasons (``Event.reasons``) but not the figures
behind them; the detectors keep those figures as public arrays (a chip's
efficiency against its group and its own level, a port's share and
retransmit share, a link's bandwidth ratio, a node's temperature trend and
path ratios, the feed's view).  Reading them here, outside the product, costs
the product nothing.  A figure the detector does not know yet is None, never
0 (unknown is not 0).
"""

from __future__ import annotations

import math
from typing import Any

import numpy.typing as npt

from rainierd.core.analysis import MonitorCore
from rainierd.core.detect import Event

__all__ = ["evidence"]

Figures = dict[str, float | None]


def _value(array: npt.NDArray[Any] | None, i: int) -> float | None:
    """Return ``array[i]`` as a float, None where it is unknown (NaN, infinite, or no such array)."""
    if array is None:
        return None
    value = float(array[i])
    return value if math.isfinite(value) else None


def _chip(core: MonitorCore, i: int) -> Figures:
    chips, gauges = core.detector.chips, core.state.chips.gauges
    return {
        "efficiency": _value(chips.efficiency, i),  # EWMA, relative to its group's median and its own level
        "own_level": _value(chips.baseline.level, i),
        "own_level_learned_s": _value(chips.baseline.history_s, i),
        "cusum": _value(chips.cusum.s, i),
        "cusum_h": chips.cusum.h,
        "util": _value(gauges.get("util"), i),
        "clock_ratio": _value(gauges.get("clock_ratio"), i),
        "temp_c": _value(gauges.get("temp_c"), i),
    }


def _efa(core: MonitorCore, i: int) -> Figures:
    efa = core.detector.efa
    return {
        "share": _value(efa.share, i),  # EWMA of throughput over its own share of its node's
        "own_share_level": _value(efa.share_base.level, i),
        "latency_ratio": _value(efa.latency_ratio, i),
        "retrans_share": _value(efa.retrans_share, i),  # bytes retransmitted above its own rate / bytes sent
        "throughput_cusum": _value(efa.throughput.s, i),
        "latency_cusum": _value(efa.latency.s, i),
        "retrans_cusum": _value(efa.retrans.s, i),
        "retrans_h": efa.retrans.h,
        "band": _value(efa.band.s, i),
    }


def _neuronlink(core: MonitorCore, i: int) -> Figures:
    links = core.detector.links
    return {
        "bandwidth_ratio": _value(links.now_ratio, i),
        "own_bandwidth_level": _value(links.bw_base.level, i),
        "drops": _value(links.drops, i),
        "down_s": _value(links.down_s, i),
        "bandwidth_cusum": _value(links.bw.s, i),
        "latency_cusum": _value(links.latency.s, i),
        "errors_cusum": _value(links.errors.s, i),
        "band": _value(links.band.s, i),
    }


def _node(core: MonitorCore, i: int) -> Figures:
    cooling, paths = core.detector.cooling, core.detector.node_paths
    out: Figures = {"temp_trend_c": _value(cooling.temp_trend, i), "power_w": _value(cooling.load, i)}
    for name, smoothed in paths.smoothed.items():
        out[f"{name}_paths_ratio"] = _value(smoothed.ratio, i)
        out[f"{name}_paths_usual"] = _value(smoothed.usual, i)
    return out


def _ultraserver(core: MonitorCore, i: int) -> Figures:
    topo, cooling = core.topology, core.detector.cooling
    nodes = [n for n in range(topo.n_nodes) if int(topo.node_ultraserver[n]) == i]
    trends = [v for n in nodes if (v := _value(cooling.temp_trend, n)) is not None]
    return {"nodes_temp_trend_max_c": max(trends) if trends else None}


def _feed(core: MonitorCore, _i: int) -> Figures:
    view = core.detector.feed.view
    return {"silent_nodes": float(view.silent_nodes), "base_nodes": float(view.base_nodes),
            "since_s": view.since_s if math.isfinite(view.since_s) else None}


_BY_KIND = {"chip": _chip, "efa": _efa, "neuronlink": _neuronlink, "node": _node, "ultraserver": _ultraserver,
            "feed": _feed}


def evidence(core: MonitorCore, event: Event) -> Figures:
    """Return the figures ``core``'s detector holds now for ``event``'s entity (empty for an unknown kind)."""
    read = _BY_KIND.get(event.entity)
    return {} if read is None else read(core, event.id)
