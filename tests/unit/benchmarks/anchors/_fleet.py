"""A hand-driven fleet state for the anchors' specifications: one UltraServer's tables filled tick by tick with
healthy telemetry (or what a test makes of it), as the monitor's ingest would leave them."""

from __future__ import annotations

import numpy as np

from benchmarks.anchors._common import View
from rainierd.core.state import FleetState
from rainierd.fleet.hardware import TRN2
from rainierd.fleet.topology import build_fleet

PEAK = 1.0e15  # a chip's healthy FP8 FLOP rate here


def healthy_state(ultraservers: int = 1) -> FleetState:
    """Return the state of ``ultraservers`` UltraServers whose entities have never reported."""
    return FleetState(build_fleet(1, ultraservers))


def sample(state: FleetState, t_s: float, rng: np.random.Generator) -> None:
    """Land one healthy sample of every entity at ``t_s`` (small noise on every figure), received at once."""
    topo = state.topology
    for table in (state.chips, state.links, state.efa, state.cooling):
        table.t_s[:] = t_s
        table.rx_s[:] = t_s
        table.dt_s[:] = 1.0
        table.samples += 1
    c, n = state.chips, topo.n_chips
    c.rates["fp8_flop_total"][:] = PEAK * (1 + 0.002 * rng.standard_normal(n))
    c.gauges["util"][:] = 0.9 + 0.002 * rng.standard_normal(n)
    c.gauges["clock_ratio"][:] = 1.0
    c.gauges["throttled"][:] = 0
    c.gauges["present"][:] = 1
    c.gauges["temp_c"][:] = 60 + 0.3 * rng.standard_normal(n)
    c.gauges["power_w"][:] = 500 + 2 * rng.standard_normal(n)
    for name in ("ecc_uncorrected_total", "sram_ecc_uncorrected_total", "exec_errors_total"):
        c.rates[name][:] = 0.0
    links = state.links
    links.gauges["lanes_up"][:] = TRN2.neuronlink_lanes
    links.gauges["bw_bytes_s"][:] = 1e11 * (1 + 0.002 * rng.standard_normal(topo.n_links))
    links.gauges["latency_us"][:] = 2 + 0.01 * rng.standard_normal(topo.n_links)
    links.rates["crc_errors_total"][:] = 0.0
    efa = state.efa
    efa.gauges["port_active"][:] = 1
    efa.gauges["latency_us"][:] = 10 + 0.05 * rng.standard_normal(topo.n_efa)
    efa.rates["tx_bytes_total"][:] = 1e10 * (1 + 0.002 * rng.standard_normal(topo.n_efa))
    for name in ("retrans_pkts_total", "unresponsive_remote_events_total", "rdma_wr_errors_total"):
        efa.rates[name][:] = 0.0
    cool = state.cooling
    cool.gauges["inlet_c"][:] = 25 + 0.1 * rng.standard_normal(topo.n_nodes)
    cool.gauges["outlet_c"][:] = 40 + 0.1 * rng.standard_normal(topo.n_nodes)
    cool.gauges["fan_rpm"][:] = 9000 + 10 * rng.standard_normal(topo.n_nodes)
    state.now_s = t_s


def view(state: FleetState, tick: int) -> View:
    """Return the anchors' view of ``state`` at ``tick``, every node in its UltraServer's group."""
    return View(tick, state, state.topology.node_ultraserver.astype(np.int64))
