"""A chip whose executions keep failing or timing out: the ``exec_errors``
and ``exec_timeouts`` reasons of a ``failed`` chip.

Why failed, not a milder state: an execution that fails (a generic,
runtime or hardware error: neuron-monitor's ``execution_stats``) or outruns
the runtime's timeout did none of its step's work, and a synchronous job
cannot step past it; its step is retried or the job restarts.  A chip that
keeps doing so stalls its job as a chip with an uncorrectable ECC error
does, and the throughput model charges it so (``failed_chip``), against the
job's measured effective FLOP/s, so a job that somehow keeps running is
charged only what it lost.  The advisory is ``drain``, not ``replace``: the
cause may be software (docs/actions.md).

Why persistence: one transient error must not flip a chip.  Each counter's
rate a second feeds a clipped CUSUM (``exec_k`` 0.02/s, about one a minute,
is tolerated; one second counts at most ``exec_cap``, 1/s; it raises at
``exec_h``, 2.4 errors net, and no one interval adds more than a third of
that).  So errors must come in at least three intervals close together (at
a 1 s or a 5 s tick alike), a burst of any size in one interval raises
nothing, and an error a minute or rarer never adds up.  Errors come one by
one, seconds apart, so an alarm is latched until ``exec_hold_s`` (60 s) of
the chip's samples pass without one (``Latch``): the CUSUM alone falls under
its threshold between errors, and a chip erring every few seconds cleared
and was raised again between them.  Then it clears after ``clear_after_s``
clean.
docs/detection.md has the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from rainierd._types import F32, B, Floats
from rainierd.core.detect._stats import ClippedCusum, Latch
from rainierd.core.state import Table

if TYPE_CHECKING:
    from rainierd.core.detect.chips import ChipParams


@dataclass(eq=False)
class ExecutionFailures:
    """Each chip's execution errors and timeouts, each counter in its own CUSUM."""

    errors: ClippedCusum
    timeouts: ClippedCusum
    errors_held: Latch
    timeouts_held: Latch

    @classmethod
    def create(cls, n: int, params: ChipParams) -> ExecutionFailures:
        """Return the judgement of ``n`` chips with no evidence yet."""
        p = params

        def cusum() -> ClippedCusum:
            return ClippedCusum.zeros(n, k=p.exec_k, h=p.exec_h, cap=p.exec_cap,
                                      ceiling=p.exec_h + p.drain_s * p.exec_k, samples=p.samples_to_raise)

        return cls(cusum(), cusum(), Latch.zeros(n, hold_s=p.exec_hold_s), Latch.zeros(n, hold_s=p.exec_hold_s))

    def update(self, table: Table, fresh: B, held: F32) -> tuple[B, B]:
        """Fold in the chips' new samples; return (erring, timing out): the chips whose CUSUM is in alarm.

        A rate is NaN where the counter is unknown or restarted: no evidence,
        the sum kept.  Nearly every chip counts none, so only the few that do
        (or still hold a sum) are computed.
        """
        return (self._judge(self.errors, self.errors_held, table.rates["exec_errors_total"], fresh, held),
                self._judge(self.timeouts, self.timeouts_held, table.rates["exec_timeouts_total"], fresh, held))

    @staticmethod
    def _judge(cusum: ClippedCusum, latch: Latch, rate: Floats, fresh: B, held: F32) -> B:
        alarm = cusum.update_sparse(rate, fresh, seconds=held)
        return latch.update(alarm, fresh & (rate > 0), np.where(fresh, held, np.float32(0.0)))
