"""Anchor (b): a Minder-style faulty-machine detector: each machine's (node's) monitoring metrics compared with
its task peers' by distance, the farthest machine flagged when far enough, and only after it stays the farthest
for several consecutive windows (Minder's continuity requirement).

Source: Y. Deng, X. Shi, Z. Jiang, X. Zhang, L. Zhang, Z. Zhang, B. Li, Z. Song, H. Zhu, G. Liu, F. Li, S. Wang,
H. Lin, J. Ye, M. Yu, "Minder: Faulty Machine Detection for Large-scale Distributed Model Training", NSDI '25,
https://www.usenix.org/conference/nsdi25/presentation/deng , https://arxiv.org/abs/2411.01791 (its published
figures, precision 0.904, F1 0.893, 3.6 s, are on ByteDance's private data).

Minder, as the paper describes it: per monitoring metric and per machine of one training task, normalise the
metric, denoise its recent window (an LSTM-VAE per metric, trained offline), compute each machine's distance
to every other machine of the task, take the machine farthest from the rest as the candidate, and report it if
it is far enough (a similarity threshold) and stays the candidate over a continuous period (the continuity
check); metrics are tried in a priority order.  What this re-implementation does in their place:

* machines are nodes; a task is the group a node is in (its job as the job documents say, else its
  UltraServer: the fault benchmark's fixed groups);
* metrics per node (mean over its entities): chip FP8 FLOP rate, utilisation, clock ratio, temperature and
  power; NeuronLink bandwidth; EFA bytes sent and retransmits a second; cooling inlet, outlet and fan speed;
* normalisation: min-max over the fleet's nodes at each tick (the paper's max-min normalisation);
* denoising: the mean of the node's last ``WINDOW`` samples (in place of the LSTM-VAE: no trained model ships);
* distance: per metric, a node's mean absolute distance to its group's other nodes, divided by the fleet's
  median of that figure (so one threshold serves every metric); the candidate of a group is its node farthest
  on any metric;
* thresholds (the paper gives no reusable numbers; our stated rule, set once): a candidate is far at
  ``FAR`` times the fleet's median distance, and reported after ``CONTINUITY`` consecutive windows as the same
  group's far candidate; it clears when it has not been one for ``CONTINUITY`` windows.

A node is all Minder can name: a fault on a chip, NeuronLink or EFA port found through its node counts, under
the benchmark's grading, as a false raise of the node (the grading wants the component); the report says so.
"""

from __future__ import annotations

import warnings
from collections import deque
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from benchmarks.anchors._common import Latch, View, node_mean
from rainierd.core.detect import Event

__all__ = ["CONTINUITY", "FAR", "WINDOW", "Minder", "node_metrics"]

WINDOW: Final = 5  # samples averaged: the denoising stand-in
FAR: Final = 4.0  # times the fleet's median distance to peers
CONTINUITY: Final = 5  # consecutive windows as the same group's far candidate
MEDIAN_FLOOR: Final = 1e-3  # of the normalised range: a metric on which every node agrees


def node_metrics(view: View) -> np.ndarray:
    """Return the (nodes x metrics) matrix of this tick's telemetry, NaN where unknown."""
    s, topo = view.state, view.topology
    n = topo.n_nodes
    columns = [
        node_mean(s.chips.rates["fp8_flop_total"], topo.chip_node, n),
        *(node_mean(s.chips.gauges[g], topo.chip_node, n) for g in ("util", "clock_ratio", "temp_c", "power_w")),
        node_mean(s.links.gauges["bw_bytes_s"], topo.link_node, n),
        node_mean(s.efa.rates["tx_bytes_total"], topo.efa_node, n),
        node_mean(s.efa.rates["retrans_pkts_total"], topo.efa_node, n),
        *(np.asarray(s.cooling.gauges[g], dtype=np.float64) for g in ("inlet_c", "outlet_c", "fan_rpm")),
    ]
    return np.stack(columns, axis=1)


@dataclass(eq=False)
class Minder:
    """Minder's similarity and continuity checks over nodes and their groups."""

    name: str = "minder"
    window: deque[np.ndarray] = field(default_factory=lambda: deque(maxlen=WINDOW))
    streak: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    calm: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    latch: Latch = field(default_factory=lambda: Latch("node", "faulty"))

    def observe(self, view: View) -> list[Event]:
        """Add this tick's node metrics to the window and run the checks; return the raises and clears."""
        x = node_metrics(view)
        n = x.shape[0]
        if self.streak.size != n:
            self.streak, self.calm = np.zeros(n, np.int64), np.zeros(n, np.int64)
        self.window.append(x)
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a node with no sample in the window: NaN
            smooth = np.nanmean(np.stack(self.window), axis=0) if len(self.window) == WINDOW else None
        candidate = np.zeros(n, bool)
        if smooth is not None:
            candidate = self._far(smooth, view.node_group)
        self.streak = np.where(candidate, self.streak + 1, 0)
        self.calm = np.where(candidate, 0, self.calm + 1)
        flagged = self.streak >= CONTINUITY
        return self.latch.update(view.tick, flagged, "minder_distance", clear=self.calm >= CONTINUITY)

    @staticmethod
    def _far(x: np.ndarray, group: np.ndarray) -> np.ndarray:
        """Return, per node, whether it is its group's farthest node and far enough on some metric."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN metrics (unknown everywhere) stay NaN
            return Minder._far_known(x, group)

    @staticmethod
    def _far_known(x: np.ndarray, group: np.ndarray) -> np.ndarray:
        n, m = x.shape
        with np.errstate(invalid="ignore", divide="ignore"):
            lo, hi = np.nanmin(x, axis=0), np.nanmax(x, axis=0)
            span = np.where(hi > lo, hi - lo, np.nan)
            z = (x - lo) / span  # nodes x metrics, in [0, 1]; NaN for unknown or a metric with no spread
        score = np.full((n, m), np.nan)
        groups = np.unique(group)
        for g in groups:
            members = np.flatnonzero(group == g)
            if members.size < 3:  # two machines cannot say which of them is the odd one
                continue
            v = z[members]  # k x m
            diff = np.abs(v[:, None, :] - v[None, :, :])  # k x k x m
            with np.errstate(invalid="ignore"):
                score[members] = np.nansum(diff, axis=1) / np.maximum(np.sum(np.isfinite(diff), axis=1) - 1, 1)
            score[members] = np.where(np.isfinite(v), score[members], np.nan)
        with np.errstate(invalid="ignore"):
            typical = np.maximum(np.nanmedian(score, axis=0), MEDIAN_FLOOR)
            ratio = np.nan_to_num(score / typical, nan=0.0).max(axis=1)
        out = np.zeros(n, bool)
        for g in groups:
            members = np.flatnonzero(group == g)
            if members.size < 3:
                continue
            best = members[int(np.argmax(ratio[members]))]
            out[best] = ratio[best] > FAR
        return out
