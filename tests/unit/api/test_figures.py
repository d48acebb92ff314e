"""Specification of the drill-downs' one table of live figures
(rainierd/api/figures.py)."""

from __future__ import annotations

import numpy as np

from rainierd.api.figures import ENTITY_FIGURES, live_values
from rainierd.core import FleetState
from rainierd.fleet.topology import build_topology


class TestFigures:
    def test_every_figure_is_a_field_of_its_entitys_table(self) -> None:
        """Each figure names a gauge or a counter total of its entity kind's state table, once, and its metric
        is in base units (a counter's ends in ``_total``)."""
        state = FleetState(build_topology("demo"))
        tables = {"chip": state.chips, "neuronlink": state.links, "efa": state.efa, "node": state.cooling}
        for entity, figures in ENTITY_FIGURES.items():
            table = tables[entity]
            fields = [figure.field for figure in figures]
            assert len(set(fields)) == len(fields)
            assert [f for f in fields if f not in table.gauges and f not in table.totals] == [], entity
            assert [f.metric for f in figures if (f.kind == "counter") != f.metric.endswith("_total")] == []

    def test_a_total_never_reported_is_unknown(self) -> None:
        """A counter total no frame has reported reads NaN, never 0; a gauge reads as stored."""
        state = FleetState(build_topology("demo"))
        ids = np.arange(3, dtype=np.int64)
        assert np.isnan(live_values(state.chips, "ecc_corrected_total", ids)).all()
        state.chips.gauges["temp_c"][ids] = 41.5
        assert live_values(state.chips, "temp_c", ids).tolist() == [41.5, 41.5, 41.5]
