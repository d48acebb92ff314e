"""FP8 throughput and work spelled one way (rainierd/fleet/units.py): as ``rainierd top`` spells them."""

from __future__ import annotations

from rainierd.fleet.units import flop_text, flops_text
from rainierd.top.model import flops as top_flops


class TestUnits:
    """FLOP/s and FLOP are spelled one way: as ``rainierd top`` spells them."""

    def test_rates_as_top_prints_them(self) -> None:
        """Every rate from 1 F/s to 100 EF/s reads the same in an advisory as on top's screens."""
        for value in (1.0, 950.0, 2.5e9, 1.2e15, 7.17e15, 166e15, 6.5e17, 9.99e19):
            assert flops_text(value) == top_flops(value)

    def test_amounts(self) -> None:
        """An amount of FLOP takes the same prefixes, Z beyond E: 1.2 PF, 25.8 EF, 3.1 ZF; unknown is -."""
        assert [flop_text(v) for v in (1.2e15, 2.58e19, 3.1e21, None, 0.0)] == ["1.2 PF", "25.8 EF", "3.1 ZF", "-",
                                                                                 "0"]
