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
nothing, and an error a minute or rarer never adds up.  Once they stop the
sum is under ``exec_h`` within ``drain_s`` (3 s) and the chip clears after
``clear_after_s`` clean.  docs/detection.md has the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rainierd._types import F32, B, Floats
from rainierd.core.detect._stats import ClippedCusum
from rainierd.core.state import Table

if TYPE_CHECKING:
    from rainierd.core.detect.chips import ChipParams

__all__ = ["ExecutionFailures"]


@dataclass(eq=False)
class ExecutionFailures:
    """Each chip's execution errors and timeouts, each counter in its own CUSUM."""

    errors: ClippedCusum
    timeouts: ClippedCusum

    @classmethod
    def create(cls, n: int, params: ChipParams) -> ExecutionFailures:
        """Return the judgement of ``n`` chips with no evidence yet."""
        p = params

        def cusum() -> ClippedCusum:
            return ClippedCusum.zeros(n, k=p.exec_k, h=p.exec_h, cap=p.exec_cap,
                                      ceiling=p.exec_h + p.drain_s * p.exec_k, samples=p.samples_to_raise)

        return cls(cusum(), cusum())

    def update(self, table: Table, fresh: B, held: F32) -> tuple[B, B]:
        """Fold in the chips' new samples; return (erring, timing out): the chips whose CUSUM is in alarm.

        A rate is NaN where the counter is unknown or restarted: no evidence,
        the sum kept.  Nearly every chip counts none, so only the few that do
        (or still hold a sum) are computed.
        """
        return (self._judge(self.errors, table.rates["exec_errors_total"], fresh, held),
                self._judge(self.timeouts, table.rates["exec_timeouts_total"], fresh, held))

    @staticmethod
    def _judge(cusum: ClippedCusum, rate: Floats, fresh: B, held: F32) -> B:
        return cusum.update_sparse(rate, fresh, seconds=held)
