"""The JSON form of a frame, validated by pydantic, for publishers other than
rainierd's own simulator.

It carries the same samples as the binary frame, one object per record, with
the same field names and units.  Every measurement field may be left out: a
publisher that does not have it (AWS neuron-monitor reports no temperature,
clock, NeuronLink or EFA figures) leaves it out, and the monitor keeps it as
unknown, never as zero.  Only the record's id is required.
``docs/wire-format.schema.json`` is generated from these models
(``rainierd schema``) and a test keeps it in step.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Final, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError

from rainierd.errors import FrameError
from rainierd.wire.records import (
    CHIP_DTYPE,
    COOLING_DTYPE,
    EFA_DTYPE,
    FACILITY_DTYPE,
    LINK_DTYPE,
    WIRE_VERSION,
    FacilityFrame,
    Frame,
    NodeFrame,
)

Counter = Annotated[int, Field(ge=0, lt=2**64)]
Id = Annotated[int, Field(ge=0, lt=2**32)]
Finite = Annotated[float, Field(allow_inf_nan=False)]
Ratio = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
NonNeg = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]


def _json_integer(value: object) -> object:
    """Refuse anything but a JSON integer (a Literal of ints takes true and 1.0: they equal 1 in Python)."""
    if type(value) is not int:
        raise ValueError(f"{value!r} is not an integer")
    return value


class _Strict(BaseModel):
    # strict: "12" is not a number, true is not a count, 3 is not a boolean.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ChipSample(_Strict):
    """One chip's sample for a tick."""

    chip: Id
    util: Ratio | None = Field(None, description="mean NeuronCore utilisation over the tick")
    clock_ratio: Ratio | None = Field(None, description="clock / nominal clock")
    throttled: bool | None = None
    temp_c: Finite | None = None
    power_w: NonNeg | None = None
    hbm_used_bytes: Counter | None = None
    fp8_flop_total: NonNeg | None = Field(None, description="FP8 FLOP executed since publisher start")
    ecc_corrected_total: Counter | None = Field(None, description="corrected ECC events in HBM")
    ecc_uncorrected_total: Counter | None = Field(None, description="uncorrected ECC events in HBM")
    sram_ecc_corrected_total: Counter | None = Field(None, description="corrected ECC events in on-chip SRAM")
    sram_ecc_uncorrected_total: Counter | None = Field(None, description="uncorrected ECC events in on-chip SRAM")
    exec_errors_total: Counter | None = Field(
        None, description="executions failed by the device or its runtime (neuron-monitor error_summary generic, "
                          "runtime and hardware; numerical and model errors are the job's, not the chip's)")
    exec_timeouts_total: Counter | None = Field(None, description="executions that outran the runtime's timeout")
    exec_latency_us: NonNeg | None = Field(
        None, description="median time on the device of one execution over the sample's period")
    present: bool | None = Field(
        None, description="false: the node's agent reports the device gone (its driver no longer lists it)")


class LinkSample(_Strict):
    """One NeuronLink's sample for a tick."""

    link: Id
    tx_bytes_total: Counter | None = None
    bw_bytes_s: NonNeg | None = None
    lanes_up: Annotated[int, Field(ge=0, le=255)] | None = None
    crc_errors_total: Counter | None = None
    replay_total: Counter | None = None
    latency_us: NonNeg | None = None


class EfaSample(_Strict):
    """One EFA port's sample for a tick (counter names as in the Linux driver)."""

    port: Id
    tx_bytes_total: Counter | None = None
    rx_bytes_total: Counter | None = None
    retrans_bytes_total: Counter | None = None
    retrans_pkts_total: Counter | None = None
    retrans_timeout_events_total: Counter | None = None
    unresponsive_remote_events_total: Counter | None = None
    impaired_remote_conn_events_total: Counter | None = None
    latency_us: NonNeg | None = None
    rx_drops_total: Counter | None = None
    rdma_wr_errors_total: Counter | None = Field(
        None, description="RDMA read and write work requests completed in error (rdma_read_wr_err + rdma_write_wr_err)")
    keep_alive_total: Counter | None = Field(
        None, description="keep-alive messages the driver received from the device (keep_alive_rcvd)")
    port_active: bool | None = Field(
        None, description="the port's state reads ACTIVE (the EFA driver reports ACTIVE whatever the link's state)")
    present: bool | None = Field(None, description="false: the node's agent reports the device gone")


class CoolingSample(_Strict):
    """One node's air cooling sample for a tick."""

    inlet_c: Finite | None = None
    outlet_c: Finite | None = None
    fan_rpm: NonNeg | None = None
    power_w: NonNeg | None = None


class FacilitySample(_Strict):
    """One site's cooling plant sample for a tick."""

    outside_c: Finite
    cooling_mode: Annotated[Literal[0, 1], BeforeValidator(_json_integer)] = Field(
        description="0 outside air, 1 evaporative water assist")
    water_l_total: NonNeg
    it_energy_j_total: NonNeg


class _FrameBase(_Strict):
    v: Annotated[Literal[1], BeforeValidator(_json_integer)] = Field(description="wire format version")
    publisher: Annotated[str, Field(min_length=1, max_length=128)]
    seq: Counter = Field(description="per publisher and node, +1 a frame (docs/publishing.md)")
    tick: Counter
    t_s: Finite = Field(description="sample time, Unix seconds")


class NodeFrameModel(_FrameBase):
    """A node's frame: its chips, the NeuronLinks it reports, its EFA ports, its cooling."""

    kind: Literal["node"]
    node: Id
    chips: Annotated[list[ChipSample], Field(max_length=64)]
    links: Annotated[list[LinkSample], Field(max_length=256)]
    efa: Annotated[list[EfaSample], Field(max_length=64)]
    cooling: CoolingSample | None = None
    period_s: Annotated[float, Field(gt=0.0, le=3_600.0, allow_inf_nan=False)] | None = Field(
        None, description="how often the publisher sends this node's frames, seconds (neuron-monitor's period): "
                          "the monitor judges the node's silence against it")


class FacilityFrameModel(_FrameBase):
    """A site's facility frame."""

    kind: Literal["facility"]
    site: Id
    facility: FacilitySample


FRAME_ADAPTER: Final[TypeAdapter[NodeFrameModel | FacilityFrameModel]] = TypeAdapter(
    Annotated[NodeFrameModel | FacilityFrameModel, Field(discriminator="kind")]
)


def _records(items: list[Any], dtype: np.dtype[np.void]) -> tuple[npt.NDArray[np.void], npt.NDArray[np.uint16]]:
    """Return the items as records, and per record which fields it had (bit i: the dtype's i-th field).

    A field an item left out is stored as 0 and its bit is clear: unknown.
    """
    assert dtype.names is not None
    # Most frames carry every field of every record: one structured conversion of the rows, instead of a
    # pass per field (half of a 16-chip node frame's decoding went to those passes).  The models' fields
    # are the dtypes' fields, in order (``_SAME_ORDER``).
    rows = [tuple(item.__dict__.values()) for item in items]
    if not any(None in row for row in rows):
        return np.array(rows, dtype=dtype), np.full(len(items), (1 << len(dtype.names)) - 1, np.uint16)
    # Still one structured conversion: each left-out field stored as 0, its bit clear.
    known = np.fromiter((sum(1 << bit for bit, v in enumerate(row) if v is not None) for row in rows),
                        np.uint16, len(rows))
    return np.array([tuple(0 if v is None else v for v in row) for row in rows], dtype=dtype), known


_SAME_ORDER: Final = all(
    tuple(model.model_fields) == dtype.names
    for model, dtype in ((ChipSample, CHIP_DTYPE), (LinkSample, LINK_DTYPE), (EfaSample, EFA_DTYPE),
                         (CoolingSample, COOLING_DTYPE), (FacilitySample, FACILITY_DTYPE))
)
if not _SAME_ORDER:  # pragma: no cover - a model edited out of step with its dtype
    raise ImportError("a JSON record model's fields are not its dtype's fields in order")


def _dicts(
    records: npt.NDArray[np.void], known: npt.NDArray[np.uint16] | None = None, bools: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """Return records as JSON objects, leaving out each field its ``known`` bit says is unknown."""
    assert records.dtype.names is not None
    names = records.dtype.names
    columns = [records[n].tolist() for n in names]
    rows = [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]
    for i, row in enumerate(rows):
        for name in bools:
            if name in row:
                row[name] = bool(row[name])
        if known is not None:
            for bit, name in enumerate(names):
                if not int(known[i]) >> bit & 1:
                    del row[name]
    return rows


def json_schema() -> dict[str, Any]:
    """Return the JSON Schema of the JSON frame form."""
    schema = FRAME_ADAPTER.json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = f"rainierd telemetry frame, wire version {WIRE_VERSION}"
    return schema


def encode_json(frame: NodeFrame | FacilityFrame) -> bytes:
    """Return the JSON encoding of a node or facility frame (the JSON form has no batches)."""
    base: dict[str, Any] = {
        "v": WIRE_VERSION, "publisher": frame.publisher, "seq": frame.seq,
        "tick": frame.tick, "t_s": frame.t_s,
    }
    if isinstance(frame, NodeFrame):
        known = frame.known or {}
        cooling = _dicts(frame.cooling, known.get("cooling"))
        base |= {
            "kind": "node", "node": frame.node,
            "chips": _dicts(frame.chips, known.get("chips"), ("throttled", "present")),
            "links": _dicts(frame.links, known.get("links")),
            "efa": _dicts(frame.efa, known.get("efa"), ("port_active", "present")),
            "cooling": cooling[0] if cooling else None,
        }
        if math.isfinite(frame.period_s):
            base["period_s"] = frame.period_s
    else:
        base |= {"kind": "facility", "site": frame.site, "facility": _dicts(frame.facility)[0]}
    return json.dumps(base, separators=(",", ":"), allow_nan=False).encode()


class _DuplicateKeyError(ValueError):
    """A JSON object named one key twice (json.loads would keep the last silently)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError(key)
        out[key] = value
    return out


def decode_json(payload: bytes) -> Frame:
    """Return the frame a JSON payload encodes.

    Raises FrameError with reason bad_json (also for a key given twice), bad_version, non_finite or
    schema (also for a value of the wrong JSON type: no coercion).
    """
    try:
        document = json.loads(payload, object_pairs_hook=_unique_keys)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise FrameError("bad_json", str(exc)[:200]) from None
    except _DuplicateKeyError as exc:
        raise FrameError("bad_json", f"key {exc.args[0]!r} appears twice in one object") from None
    if not isinstance(document, dict):
        raise FrameError("bad_json", "a frame must be a JSON object")
    version = document.get("v")
    if type(version) is not int or version != WIRE_VERSION:  # true and 1.0 equal 1, and are not version 1
        raise FrameError("bad_version", f"wire version {version!r} is not {WIRE_VERSION}")
    try:
        model = FRAME_ADAPTER.validate_python(document)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        reason = "non_finite" if any(e["type"] == "finite_number" for e in errors) else "schema"
        first = errors[0]
        where = ".".join(str(part) for part in first["loc"])
        raise FrameError(reason, f"{where}: {first['msg']}") from None
    if isinstance(model, NodeFrameModel):
        cooling = [model.cooling] if model.cooling is not None else []
        chips, links = _records(model.chips, CHIP_DTYPE), _records(model.links, LINK_DTYPE)
        efa, air = _records(model.efa, EFA_DTYPE), _records(cooling, COOLING_DTYPE)
        return NodeFrame(
            model.publisher, model.seq, model.tick, model.t_s, model.node, chips[0], links[0], efa[0], air[0],
            known={"chips": chips[1], "links": links[1], "efa": efa[1], "cooling": air[1]},
            period_s=float("nan") if model.period_s is None else model.period_s,
        )
    return FacilityFrame(
        model.publisher, model.seq, model.tick, model.t_s, model.site,
        _records([model.facility], FACILITY_DTYPE)[0],
    )
