"""FLOP/s and FLOP in text read the same on every surface: an SI prefix and three significant figures, as
``top`` prints."""

from __future__ import annotations

import pytest

from rainierd.fleet.units import flop_text, flops_text
from rainierd.top.model import flops


@pytest.mark.parametrize(("value", "text"), [
    (1.66e17, "166 PF/s"), (7.17e15, "7.17 PF/s"), (2.4e13, "24 TF/s"), (1.299e15, "1.3 PF/s"), (5e9, "5 GF/s"),
    (650e18, "650 EF/s"), (12.0, "12 F/s"), (0.0, "0"), (None, "-"), (float("nan"), "-"),
])
def test_flop_rates_read_with_an_si_prefix(value: float | None, text: str) -> None:
    """Each rate is spelled with its SI prefix; zero is 0 and an unknown rate is a dash, never 0."""
    assert flops_text(value) == text


@pytest.mark.parametrize("value", [1.66e17, 7.17e15, 2.4e13, 3.5e9, 0.0, None, 1.0, 950.0, 6.5e17, 9.99e19])
def test_top_spells_them_the_same(value: float | None) -> None:
    """top's own formatter and this one agree, so an advisory's cost reads as top's screen does."""
    assert flops_text(value) == flops(value)


def test_amounts() -> None:
    """An amount of FLOP takes the same prefixes, Z beyond E: 1.2 PF, 25.8 EF, 3.1 ZF; unknown is -."""
    assert [flop_text(v) for v in (1.2e15, 2.58e19, 3.1e21, None, 0.0)] == ["1.2 PF", "25.8 EF", "3.1 ZF", "-", "0"]
