"""Which Neuron device (Trainium2 chip) each of neuron-monitor's logical
NeuronCores is on.  Pure, no I/O.

neuron-monitor indexes its per-core data by logical NeuronCore, node-wide
(``neuroncores_in_use``: ``"0"`` to ``"63"`` on a trn2.48xlarge at the
default Logical NeuronCore configuration, LNC=2; ``"0"`` to ``"127"`` at
LNC=1), and says how many make a device in ``neuron_hardware_info``, in a
shape that changed once (aws-neuron/aws-neuron-sdk,
tools/neuron-sys-tools/neuron-monitor-user-guide.rst):

- today (since commit d251c2e7, "update references to LNC in trn2 tools"):
  ``"neuroncore_per_device_count": 4, "logical_neuroncore_config": 2``:
  the count is of logical cores;
- at the 2.21 release (commit 2086a70a): ``"neuroncore_per_device_count": 8,
  "logical_neuroncore_size": 2``: the count is of physical cores, each
  logical core ``logical_neuroncore_size`` of them.  Read as logical, that
  shape puts 64 logical cores on 8 chips (147 GiB of HBM on a 96 GiB chip)
  and leaves 8 chips empty.

On Trn2 a logical core also names its physical cores (``"v3d": {"nc_v3.0":
…, "nc_v3.1": …}``, "only available on Trn2"): physical core ``N`` is on
device ``N // 8`` (every Trainium2 has 8 physical NeuronCore-v3:
about-neuron/arch/neuron-features/logical-neuroncore-config.rst).  Those
names are the most direct statement of where a core is, so they are
preferred; then the hardware info; without either, the Trn2 default (8
physical cores, LNC=2, so 4 logical cores a device).  A mapping is checked,
never trusted: a hardware info that contradicts itself (logical cores times
LNC is not the physical count), a core whose physical cores lie on two
devices, or a device index beyond the node's chips is refused and counted,
and the cores it would have placed are unknown.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from rainierd.bridge._config import BridgeConfig
from rainierd.bridge._values import Refusals, count, is_error

_PHYSICAL: Final = re.compile(r"nc_v3\.([0-9]{1,6})")
_DEFAULT_LNC: Final = 2  # Trn2's default Logical NeuronCore configuration (logical-neuroncore-config.rst)


@dataclass(frozen=True, slots=True)
class HardwareInfo:
    """What ``neuron_hardware_info`` says, each field None when absent or refused."""

    device_count: int | None = None
    device_memory_bytes: int | None = None
    # Logical NeuronCores a device; None: not said, or said in contradiction (then only v3d names place cores).
    logical_per_device: int | None = None
    consistent: bool = True


def _lnc(value: object, field: str, physical: int, refusals: Refusals) -> int | None:
    """Return a Logical NeuronCore configuration (physical cores a logical core) if it divides ``physical``."""
    lnc = count(value, field, refusals)
    if lnc is None:
        return None
    if lnc == 0 or physical % lnc:
        refusals.add(field, "out_of_range")
        return None
    return lnc


def read_hardware_info(info: object, config: BridgeConfig, refusals: Refusals) -> HardwareInfo | None:
    """Return what ``neuron_hardware_info`` says; None when it is absent, null, not an object or carries an error."""
    if info is None:
        return None
    if not isinstance(info, Mapping):
        refusals.add("neuron_hardware_info", "wrong_type")
        return None
    if is_error(info.get("error")):
        return None
    physical = config.hardware.neuron_cores
    devices = memory = per_device = None
    if "neuron_device_count" in info and (devices := count(info["neuron_device_count"], "neuron_device_count",
                                                           refusals)) is not None \
            and not 1 <= devices <= config.chips_per_node:
        refusals.add("neuron_device_count", "out_of_range")
        devices = None
    if "neuron_device_memory_size" in info and (memory := count(
            info["neuron_device_memory_size"], "neuron_device_memory_size", refusals)) is not None \
            and not 0 < memory <= config.hardware.hbm_bytes:
        refusals.add("neuron_device_memory_size", "out_of_range" if memory == 0 else "above_capacity")
        memory = None
    if "neuroncore_per_device_count" in info and (per_device := count(
            info["neuroncore_per_device_count"], "neuroncore_per_device_count", refusals)) is not None \
            and not 1 <= per_device <= physical:
        refusals.add("neuroncore_per_device_count", "out_of_range")
        per_device = None
    size = _lnc(info["logical_neuroncore_size"], "logical_neuroncore_size", physical, refusals) \
        if "logical_neuroncore_size" in info else None
    lnc = _lnc(info["logical_neuroncore_config"], "logical_neuroncore_config", physical, refusals) \
        if "logical_neuroncore_config" in info else None
    logical: int | None
    if per_device is not None and size is not None:  # the 2.21 shape: a count of physical cores
        logical = per_device // size if per_device % size == 0 else None
        lnc = size
    elif per_device is not None:  # today's shape: a count of logical cores
        logical = per_device
    elif lnc is not None or size is not None:
        lnc = lnc or size
        assert lnc is not None
        logical = physical // lnc
    else:
        return HardwareInfo(devices, memory, None)
    consistent = logical is not None and (lnc is None or logical * lnc == physical)
    if not consistent:
        refusals.add("neuroncore_per_device_count", "inconsistent")
    return HardwareInfo(devices, memory, logical if consistent else None, consistent)


def v3d_device(v3d: object, physical: int, refusals: Refusals) -> int | None:
    """Return the device a logical core's ``v3d`` physical cores are on; None when they do not say (counted).

    Names other than ``nc_v3.<N>`` are ``wrong_type``; physical cores on two
    devices are ``inconsistent``.
    """
    if not isinstance(v3d, Mapping) or not v3d:
        refusals.add("v3d", "wrong_type")
        return None
    devices = set()
    for name in v3d:
        match = _PHYSICAL.fullmatch(name) if isinstance(name, str) else None
        if match is None:
            refusals.add("v3d", "wrong_type")
            return None
        devices.add(int(match[1]) // physical)
    if len(devices) != 1:
        refusals.add("v3d", "inconsistent")
        return None
    return devices.pop()


@dataclass(frozen=True, slots=True)
class CoreMap:
    """Logical core → device for one report: its v3d names first, else ``logical_per_device``."""

    chips: int
    logical_per_device: int | None  # None: nothing but v3d names places a core
    v3d: Mapping[int, int]  # logical core -> device, from its physical cores' names
    cores_per_device: int | None  # logical cores a device has (None: unknown, so no device is known whole)

    @classmethod
    def of(
        cls, hardware: HardwareInfo | None, config: BridgeConfig, refusals: Refusals, *, v3d: Mapping[int, int],
        v3d_width: int | None, highest_core: int,
    ) -> CoreMap:
        """Return the map of a report whose hardware info is ``hardware`` (None: absent), whose cores' v3d names
        placed ``v3d`` with ``v3d_width`` physical cores each (None: none did, or not all alike), and whose
        highest logical core index is ``highest_core`` (-1: none).

        Without hardware info the Trn2 default (LNC=2) places cores, unless a
        core index beyond the node under it shows the default is not the
        configuration in use: then only v3d names place cores.
        """
        physical = config.hardware.neuron_cores
        per_device: int | None
        if hardware is None or (hardware.logical_per_device is None and hardware.consistent):
            per_device = physical // _DEFAULT_LNC
            if highest_core >= config.chips_per_node * per_device:
                refusals.add("neuroncore_index", "inconsistent")
                per_device = None
        else:
            per_device = hardware.logical_per_device
        whole = physical // v3d_width if v3d_width and physical % v3d_width == 0 else per_device
        return cls(config.chips_per_node, per_device, v3d, whole)

    def device(self, core: int, refusals: Refusals) -> int | None:
        """Return the device of logical core ``core``; None, counted, when nothing places it on the node."""
        device = self.v3d.get(core)
        if device is None and self.logical_per_device is not None:
            device = core // self.logical_per_device
        if device is None:
            refusals.add("neuroncore_index", "inconsistent")
            return None
        if device >= self.chips:
            refusals.add("neuroncore_index", "out_of_range")
            return None
        return device
