"""How real the simulated telemetry looks, as draws from the model's generator:
each node's sample time and interval, gauge noise (Gaussian, or heavy-tailed
and interval-averaged under a realistic profile), short spikes and bursts,
and Poisson counters that follow each node's interval.

Kept apart from the fleet model so that the physics there reads as physics;
the order of the draws is the seed's stream, so a change here changes every
value a seed gives (tests/unit/sim/test_profiles.py pins the ideal profile's).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from rainierd._types import F64
from rainierd.fleet import Topology
from rainierd.sim.params import FleetParams
from rainierd.sim.profile import Profile


class Noise:
    """The random side of the telemetry of one fleet, sampled every ``tick_s``."""

    def __init__(
        self, topology: Topology, rng: np.random.Generator, *, tick_s: float, params: FleetParams,
        profile: Profile, node_phase_s: F64,
    ) -> None:
        self.topology, self.rng, self.tick_s = topology, rng, tick_s
        self.params, self.profile = params, profile
        self._node_phase_s = node_phase_s
        # Each node's interval since its previous sample; None while every node samples on the tick.
        self.node_dt: F64 | None = None
        self._node_t_prev: F64 | None = None
        # Each node's true previous and current sample times (Unix seconds), set by ``node_times``.
        self.node_t0: F64 | None = None
        self.node_t1: F64 | None = None

    def node_times(self, t_s: float) -> F64:
        """Return each node's sample time of the tick due at ``t_s``, and keep each node's interval since its last."""
        prof, n = self.profile, self.topology.n_nodes
        if prof.tick_aligned:
            self.node_t0, self.node_t1 = np.full(n, t_s - self.tick_s), np.full(n, t_s)
            return np.full(n, t_s)
        sd = prof.sample_jitter_frac * self.tick_s + prof.sample_jitter_s
        # Clipped at 3 sigma so that a node's samples stay in order.
        jitter = np.clip(self.rng.normal(0.0, sd, n), -3.0 * sd, 3.0 * sd) if sd > 0 else np.zeros(n)
        node_t = np.asarray(t_s + self._node_phase_s + jitter, dtype=np.float64)
        self.node_dt = np.full(n, self.tick_s) if self._node_t_prev is None else node_t - self._node_t_prev
        self.node_t0 = node_t - self.node_dt
        self.node_t1 = node_t
        self._node_t_prev = node_t
        return node_t

    def add_poisson(
        self,
        counter: npt.NDArray[np.uint64],
        base_per_s: float | F64,
        extra_per_s: F64 | None = None,
        *,
        node_of: npt.NDArray[np.int64] | None = None,
    ) -> None:
        """Add Poisson(rate x interval) events to every entity's ``counter``, in time that follows the events.

        A uniform ``base_per_s``: the fleet's total is drawn at once and
        spread over the entities, which gives each one exactly an independent
        Poisson count: a 1e-3/s trickle over 1.5M links costs ~1,500 draws,
        not 1.5M.  When nodes sample off the tick, events are drawn over the
        longest interval and each kept with its own node's (``node_of``)
        interval over that: thinning, exact for Poisson.  A per-entity
        ``base_per_s`` (a profile's uneven trickle) is one draw per entity.
        ``extra_per_s`` (faults) adds a Poisson draw where it is non-zero.
        """
        n, rng, dt_node = counter.size, self.rng, self.node_dt
        if not isinstance(base_per_s, float | int):
            per_node = n // self.topology.n_nodes
            counter += rng.poisson(self.per_entity_s(base_per_s, per_node)).astype(np.uint64)
            hits = None
        elif dt_node is None:
            total = int(rng.poisson(base_per_s * self.tick_s * n))
            hits = rng.integers(n, size=total) if total else None
        else:
            span = float(dt_node.max())
            hits = rng.integers(n, size=int(rng.poisson(base_per_s * n * span)))
            if node_of is not None:
                hits = hits[rng.uniform(0.0, span, hits.size) < dt_node[node_of[hits]]]
        if hits is not None and hits.size > n // 16:  # many events: one counting pass beats scattering them
            counter += np.bincount(hits, minlength=n).astype(np.uint64)
        elif hits is not None and hits.size:
            np.add.at(counter, hits, np.uint64(1))
        if extra_per_s is not None:
            hot = np.flatnonzero(extra_per_s)
            if hot.size:
                span_hot = self.tick_s if dt_node is None or node_of is None else dt_node[node_of[hot]]
                counter[hot] += rng.poisson(extra_per_s[hot] * span_hot).astype(np.uint64)

    def add_poisson_means(self, counter: npt.NDArray[np.uint64], mean: F64) -> None:
        """Add Poisson(``mean``) events to every entity's ``counter``, each its own mean for this interval.

        Drawn as one Poisson process over the entities laid end to end: the
        total at once, each event placed by where it falls on the cumulative
        means.  Exact, and it costs the events drawn plus one pass, where one
        Poisson draw per entity cost ~28 ms over rainier's 500k EFA ports.
        """
        cumulative = np.cumsum(np.fmax(mean, 0.0))
        total = float(cumulative[-1]) if cumulative.size else 0.0
        events = int(self.rng.poisson(total)) if total > 0 else 0
        if not events:
            return
        draws = self.rng.uniform(0.0, total, events)
        if events > counter.size // 16:
            # Many events: counted per entity by where the sorted draws fall between its cumulative means, a
            # pass over each in order, where placing each draw alone was a random probe of the whole fleet's
            # means (~0.1-0.25 s a tick over rainier-1m's 1M ports).  The same counts: entity j holds the draws
            # in [cumulative[j-1], cumulative[j]), and a draw of exactly ``total`` (rounding) is the last one's.
            draws.sort()
            below = np.searchsorted(draws, cumulative, side="left")
            counts = np.diff(below, prepend=0)
            counts[-1] += events - below[-1]
            counter += counts.astype(np.uint64)
            return
        hits = np.searchsorted(cumulative, draws, side="right")
        np.minimum(hits, counter.size - 1, out=hits)  # a draw of exactly ``total`` (rounding) is the last one's
        np.add.at(counter, hits, np.uint64(1))

    def per_entity_s(self, values: npt.NDArray[np.floating[Any]], per_node: int) -> F64:
        """Return ``values`` (per second) times each entity's interval: its node's time between samples."""
        if self.node_dt is None:
            return np.asarray(values * self.tick_s, dtype=np.float64)
        return np.asarray((values.reshape(-1, per_node) * self.node_dt[:, None]).ravel(), dtype=np.float64)

    def bursts(self, n: int) -> npt.NDArray[np.int64]:
        """Return the entities that have a burst this tick.

        Ideal: each with probability burst_prob x noise a tick.  A profile
        with ``spike_per_s`` sets a rate in time, so a longer tick holds more.
        """
        per_s = self.profile.spike_per_s
        prob = self.params.burst_prob if per_s <= 0 else per_s * self.tick_s
        count = int(self.rng.binomial(n, min(1.0, prob * self.params.noise)))
        return self.rng.integers(n, size=count)

    def spike(self, low: float, high: float, size: int) -> F64:
        """Return multipliers of gauges that spiked (or dipped) this tick, by U(low, high) while it lasted.

        A gauge averaged over the interval shows a spike of d seconds diluted
        by the interval: 1 + (m - 1) x min(d, tick) / tick.
        """
        mult = self.rng.uniform(low, high, size)
        if not self.profile.interval_averaged:
            return mult
        lasted_s = self.rng.uniform(*self.profile.spike_s, size)
        return np.asarray(1.0 + (mult - 1.0) * np.minimum(lasted_s, self.tick_s) / self.tick_s, dtype=np.float64)

    def normal(self, n: int, sigma: float) -> npt.NDArray[np.float32]:
        """Return ``n`` Gaussian draws with standard deviation ``sigma``, whatever the profile."""
        noise = self.rng.standard_normal(n, dtype=np.float32)
        noise *= np.float32(sigma)
        return noise

    def jitter(self, n: int, sigma: float) -> npt.NDArray[np.float32]:
        """Return a gauge's zero-mean noise with standard deviation ``sigma`` at a 1 s interval.

        Ideal: Gaussian.  The profile may make it Student-t (heavy tails,
        scaled to the same variance) and, for a gauge averaged over the
        interval, scale it by 1 / sqrt(tick_s).
        """
        prof = self.profile
        if prof.interval_averaged:
            sigma /= float(np.sqrt(self.tick_s))
        if prof.noise_dof <= 0:
            return self.normal(n, sigma)
        # t = z / sqrt(chi2 / dof), chi2 = 2 x Gamma(dof / 2); x sqrt((dof - 2) / dof) for unit variance.
        noise = self.rng.standard_normal(n, dtype=np.float32)
        shape = prof.noise_dof / 2.0
        if shape == int(shape) and shape <= 4:  # Gamma(k) as k exponentials: half the cost of standard_gamma
            chi_half = self.rng.standard_exponential((int(shape), n), dtype=np.float32).sum(axis=0)
        else:
            chi_half = self.rng.standard_gamma(shape, n, dtype=np.float32)
        np.maximum(chi_half, np.float32(1e-6), out=chi_half)
        noise *= np.float32(sigma * np.sqrt((prof.noise_dof - 2.0) / 2.0))
        noise /= np.sqrt(chi_half)
        return noise
