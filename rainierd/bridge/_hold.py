"""A metric group a report leaves out, held at its last content for a while.
Pure: the wall time comes in with the report.

The neuron-monitor user guide says a report is "complete" whenever it is
written, and that each group is collected when its period comes round
(tools/neuron-sys-tools/neuron-monitor-user-guide.rst, "Overview",
"Execution model", "The JSON output format").  Whether a group that is not
due is repeated with its last content or left out is not said.  Repeated,
the bridge judges it not new (``_node``); left out, it would make every
report between two captures of a slower group a report without it: ECC
unknown in every other frame, or a NeuronCore counters group of a longer
period making most frames blind.

So a group left out of a report is filled in with its last content, which
the bridge then judges repeated, for at most two of its periods and a
second after it was last seen; after that it is unknown, as a group that
is not configured, or no longer collected, must be.  A group that is
``null`` or carries an error is never filled in: that is a statement, not
an omission.  A runtime that left the report is not brought back, with one
exception: once the stream has shown that it leaves groups out, an empty
``neuron_runtime_data`` may only mean that no runtime group was due, so the
last runtimes are held like a group (a job that really ended shows as idle
two periods later, and no frame is published meanwhile).  In a stream that
repeats its groups an empty list is a node running nothing, at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from rainierd.bridge._report import MAX_PERIOD_S, RUNTIME_GROUPS, SYSTEM_GROUPS, runtime_key
from rainierd.bridge._values import is_error

_HOLD_PERIODS: Final = 2.0
_HOLD_SLACK_S: Final = 1.0


@dataclass(frozen=True, slots=True)
class _Seen:
    group: Mapping[str, object]
    wall_s: float
    until_s: float


def _period(group: Mapping[str, object]) -> float | None:
    period = group.get("period")
    if isinstance(period, bool) or not isinstance(period, int | float):
        return None
    return float(period) if 0.0 < period <= MAX_PERIOD_S else None


class GroupHold:
    """Fills in the groups a report leaves out with their last content, for a bounded time."""

    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}
        self._runtimes: tuple[list[object], float] | None = None  # the last non-empty runtime list, held until
        self.filled = 0  # groups filled in since start

    def fill(self, document: Mapping[str, object], *, wall_s: float) -> Mapping[str, object]:
        """Return ``document`` with each group it leaves out, and held, filled in (a copy where changed)."""
        self._seen = {k: v for k, v in self._seen.items() if v.until_s >= wall_s}
        out: dict[str, Any] = dict(document)
        system = document.get("system_data")
        if isinstance(system, Mapping):
            out["system_data"] = self._groups(system, "system", SYSTEM_GROUPS, wall_s)
        runtimes = document.get("neuron_runtime_data")
        if runtimes == [] and self.filled and self._runtimes is not None and self._runtimes[1] >= wall_s:
            runtimes = self._runtimes[0]
            self.filled += 1
        elif isinstance(runtimes, list) and runtimes:
            self._runtimes = (runtimes, wall_s + _HOLD_PERIODS * self._longest(runtimes) + _HOLD_SLACK_S)
        if isinstance(runtimes, list):
            entries: list[object] = []
            for entry in runtimes:
                if isinstance(entry, Mapping) and (key := runtime_key(entry)) is not None \
                        and isinstance(report := entry.get("report"), Mapping) and not is_error(entry.get("error")):
                    entries.append({**entry, "report": self._groups(report, key, RUNTIME_GROUPS, wall_s)})
                else:
                    entries.append(entry)
            out["neuron_runtime_data"] = entries
        return out

    @staticmethod
    def _longest(runtimes: list[object]) -> float:
        """Return the longest NeuronCore counters period of ``runtimes`` (neuron-monitor's default 5 s if none)."""
        periods = [p for e in runtimes if isinstance(e, Mapping) and isinstance(r := e.get("report"), Mapping)
                   and isinstance(g := r.get("neuroncore_counters"), Mapping) and (p := _period(g)) is not None]
        return max(periods, default=5.0)

    def _groups(self, holder: Mapping[str, object], prefix: str, names: tuple[str, ...],
                wall_s: float) -> Mapping[str, object]:
        """Return ``holder`` with its absent groups among ``names`` filled in, remembering those present."""
        filled: dict[str, object] | None = None
        for name in names:
            key = f"{prefix}/{name}"
            group = holder.get(name, ...)
            if group is ...:
                seen = self._seen.get(key)
                if seen is not None:
                    filled = filled if filled is not None else dict(holder)
                    filled[name] = seen.group
                    self.filled += 1
            elif isinstance(group, Mapping) and not is_error(group.get("error")) \
                    and (period := _period(group)) is not None:
                self._seen[key] = _Seen(group, wall_s, wall_s + _HOLD_PERIODS * period + _HOLD_SLACK_S)
            else:
                self._seen.pop(key, None)
        return holder if filled is None else filled
