"""msgspec Structs mirroring the JSON node frame's pydantic models, for
``benchmarks aggregate``'s decoder comparison only (the product decodes with
the pydantic models, rainierd/wire/jsonform.py).

No ``from __future__ import annotations``: msgspec resolves the field types
of a Struct from its class namespace when a decoder is built.
"""

import msgspec

__all__ = ["Node"]


class Chip(msgspec.Struct, forbid_unknown_fields=True):
    chip: int
    util: float | None = None
    clock_ratio: float | None = None
    throttled: bool | None = None
    temp_c: float | None = None
    power_w: float | None = None
    hbm_used_bytes: int | None = None
    fp8_flop_total: float | None = None
    ecc_corrected_total: int | None = None
    ecc_uncorrected_total: int | None = None

class Link(msgspec.Struct, forbid_unknown_fields=True):
    link: int
    tx_bytes_total: int | None = None
    bw_bytes_s: float | None = None
    lanes_up: int | None = None
    crc_errors_total: int | None = None
    replay_total: int | None = None
    latency_us: float | None = None

class Efa(msgspec.Struct, forbid_unknown_fields=True):
    port: int
    tx_bytes_total: int | None = None
    rx_bytes_total: int | None = None
    retrans_bytes_total: int | None = None
    retrans_pkts_total: int | None = None
    retrans_timeout_events_total: int | None = None
    unresponsive_remote_events_total: int | None = None
    impaired_remote_conn_events_total: int | None = None
    latency_us: float | None = None

class Cooling(msgspec.Struct, forbid_unknown_fields=True):
    inlet_c: float | None = None
    outlet_c: float | None = None
    fan_rpm: float | None = None
    power_w: float | None = None

class Node(msgspec.Struct, forbid_unknown_fields=True):
    v: int
    kind: str
    publisher: str
    seq: int
    tick: int
    t_s: float
    node: int
    chips: list[Chip]
    links: list[Link]
    efa: list[Efa]
    cooling: Cooling | None = None

