"""Specification of what ``rainierd top`` says, without a terminal (rainierd/top/model.py, heatmap.py's
layout): how figures are spelled, when the monitor counts as behind, stalled or unreachable, how a share is
coloured, and where the heat map's cursor goes."""

from __future__ import annotations

from typing import Any

import pytest

from rainierd.top.heatmap import HeatLayout, labelled_width, ordered
from rainierd.top.model import (
    COLOURS,
    UNKNOWN_COLOUR,
    Health,
    Scale,
    ScaleMode,
    View,
    cause_text,
    colour_of,
    event_text,
    first_cause,
    fit,
    flops,
    health,
    percent,
    reference_share,
    seconds,
    si,
    state_word,
)

GREEN, RED = COLOURS[-1], COLOURS[0]


def fleet(**monitor: Any) -> dict[str, Any]:
    return {"generation": 7, "tick": 6, "monitor": {"lag_s": 0.4, "overloaded": False, "backlog_messages": 0,
                                                    "connected": True, **monitor}}


def judge(view: View, **kw: Any) -> tuple[str, str]:
    args: dict[str, Any] = {"now_s": 100.0, "last_ok_s": 100.0, "last_error": None, "generation_since_s": 99.0,
                            "behind_after_s": 10.0, "stalled_after_s": 10.0}
    args.update(kw)
    verdict = health(view, **args)
    return verdict.link, verdict.text


class TestHealth:
    def test_live(self) -> None:
        assert judge(View(fleet=fleet())) == ("live", "live")

    def test_connecting_before_any_answer(self) -> None:
        assert judge(View(), last_ok_s=None)[0] == "connecting"

    def test_unreachable_says_why_and_how_old_the_screen_is(self) -> None:
        link, text = judge(View(fleet=fleet()), last_error="connection refused", last_ok_s=40.0)
        assert link == "unreachable"
        assert "connection refused" in text
        assert "60 s ago" in text

    def test_unreachable_before_anything_was_shown(self) -> None:
        link, text = judge(View(), last_error="TLS failed: CERTIFICATE_VERIFY_FAILED", last_ok_s=None)
        assert link == "unreachable"
        assert "nothing shown yet" in text
        assert "CERTIFICATE_VERIFY_FAILED" in text

    def test_stalled_when_the_generation_stops_moving(self) -> None:
        assert judge(View(fleet=fleet()), generation_since_s=85.0) == ("stalled",
                                                                        "STALLED: no new analysis for 15 s")
        assert judge(View(fleet=fleet()), generation_since_s=91.0)[0] == "live"

    @pytest.mark.parametrize(("monitor", "says"), [
        ({"lag_s": 12.0}, "newest sample 12 s old"),
        ({"overloaded": True, "backlog_messages": 5000}, "overloaded, 5,000 messages queued"),
        ({"connected": False}, "its broker session is down"),
    ])
    def test_behind(self, monitor: dict[str, Any], says: str) -> None:
        link, text = judge(View(fleet=fleet(**monitor)))
        assert link == "behind"
        assert says in text

    def test_unreachable_beats_stalled_beats_behind(self) -> None:
        view = View(fleet=fleet(lag_s=60.0))
        assert judge(view, generation_since_s=0.0)[0] == "stalled"
        assert judge(view, generation_since_s=0.0, last_error="refused")[0] == "unreachable"

    def test_a_refused_fleet_says_what_and_how_old_the_screen_is(self) -> None:
        """The fleet's answer refused: the BAD ANSWER line, and since when the figures on screen are."""
        view = View(fleet=fleet())
        assert judge(view, now_s=112.0, refused="BAD ANSWER /api/v1/fleet: tick missing") == (
            "bad_answer", "BAD ANSWER /api/v1/fleet: tick missing; showing what it said 12 s ago")

    def test_a_documents_trouble_is_on_the_banner_not_live(self) -> None:
        """The fleet answers but another document did not (or was refused): its line, and how many more."""
        trouble = {"heat": Health("unreachable", "UNREACHABLE: /api/v1/ultraservers: no answer within 5 s"),
                   "sites": Health("bad_answer", "BAD ANSWER /api/v1/sites: sites: a string where a list belongs")}
        assert judge(View(fleet=fleet(), trouble=trouble)) == (
            "unreachable", "UNREACHABLE: /api/v1/ultraservers: no answer within 5 s (and 1 more)")

    def test_unreachable_beats_refused_beats_trouble_beats_stalled(self) -> None:
        """The worst thing true is on the banner: no answer, then the fleet refused, then another document."""
        view = View(fleet=fleet(), trouble={"sites": Health("bad_answer", "BAD ANSWER /api/v1/sites: x")})
        assert judge(view, generation_since_s=0.0)[0] == "bad_answer"
        assert judge(view, generation_since_s=0.0, refused="BAD ANSWER /api/v1/fleet: y")[1].startswith(
            "BAD ANSWER /api/v1/fleet: y")
        assert judge(view, refused="BAD ANSWER /api/v1/fleet: y", last_error="refused")[0] == "unreachable"


class TestSpelling:
    @pytest.mark.parametrize(("value", "text"), [
        (1.66272e17, "166 PF/s"), (7.17e15, "7.17 PF/s"), (6.49e20, "649 EF/s"), (3e12, "3 TF/s"), (0.0, "0"),
        (None, "-"), (float("nan"), "-"),
    ])
    def test_flops(self, value: float | None, text: str) -> None:
        assert flops(value) == text

    def test_percent_and_seconds(self) -> None:
        assert (percent(0.5813), percent(None)) == ("58.1%", "-")
        assert [seconds(s) for s in (0.44, 12.4, 300, 9000)] == ["0.4 s", "12 s", "5 min", "2.5 h"]

    def test_causes_costliest_first_and_zero_left_out(self) -> None:
        lost = {"failed_chip": 0.0, "degraded_efa": 1e12, "degraded_neuronlink": 7.17e15, "straggler": 2e13}
        assert cause_text(lost, top=2) == "NeuronLink 7.17 PF/s, straggler 20 TF/s"
        assert cause_text({"failed_chip": 0.0}) == "none"

    def test_event_line_names_entity_where_and_the_job_it_hurts(self) -> None:
        line = event_text({"tick": 36, "entity": "neuronlink", "id": 224, "before": "healthy", "after": "degraded",
                           "reasons": ["lanes"], "jobs": [{"job": "lab/pretrain", "flops": 7.1e15},
                                                          {"job": "lab/x", "flops": 1e12}], "ultraserver": "u1"})
        assert line == "tick 36  neuronlink 224 (u1)  healthy -> degraded  [lanes]  hurts lab/pretrain 7.1 PF/s +1"

    def test_a_canonical_id_is_not_followed_by_its_ultraserver(self) -> None:
        """``s0/u1/n4/chip0/link2`` already says where it is: the feed line does not repeat ``(s0/u1)``."""
        line = event_text({"tick": 36, "entity": "neuronlink", "id": "s0/u1/n4/chip0/link2", "index": 224,
                           "before": "healthy", "after": "degraded", "reasons": ["lanes"], "jobs": [],
                           "ultraserver": "s0/u1"})
        assert line == "tick 36  neuronlink s0/u1/n4/chip0/link2  healthy -> degraded  [lanes]"


class TestScale:
    def test_kept_is_effective_over_effective_plus_lost(self) -> None:
        kept = Scale.of("kept", ())
        assert kept.value({"effective_flops": 75.0, "lost_flops": 25.0}) == 0.75
        assert kept.colour({"effective_flops": 1.0, "lost_flops": 0.0}) == GREEN
        assert kept.colour({"effective_flops": 1.0, "lost_flops": 1.0}) == RED

    def test_kept_has_no_figure_without_work_or_loss(self) -> None:
        """An idle UltraServer is grey, not red: no work is not a fault."""
        kept = Scale.of("kept", ())
        assert kept.colour({"effective_flops": 0.0, "lost_flops": 0.0}) == UNKNOWN_COLOUR
        assert kept.colour({"effective_flops": None, "lost_flops": 1.0}) == UNKNOWN_COLOUR

    def test_peak_is_against_the_healthy_tenth(self) -> None:
        cells = [{"effective_share": 0.6}] * 90 + [{"effective_share": 0.3}] * 9 + [{"effective_share": None}]
        peak = Scale.of("peak", cells)
        assert peak.reference == 0.6
        assert peak.colour({"effective_share": 0.6}) == GREEN
        assert peak.colour({"effective_share": 0.2}) == RED
        assert peak.colour({"effective_share": 0.5}) not in (GREEN, RED, UNKNOWN_COLOUR)
        assert peak.colour({"effective_share": None}) == UNKNOWN_COLOUR
        assert reference_share([None, 0.0]) is None
        assert Scale.of("peak", [{"effective_share": None}]).colour({"effective_share": 0.5}) == UNKNOWN_COLOUR

    @pytest.mark.parametrize("mode", ["kept", "peak"])
    def test_colours_fall_with_the_figure(self, mode: ScaleMode) -> None:
        scale = Scale.of(mode, [{"effective_share": 1.0}])
        values = (0.995, 0.96, 0.9, 0.7, 0.1) if mode == "kept" else (0.99, 0.93, 0.8, 0.6, 0.1)
        seen = [COLOURS.index(colour_of(v, scale.floors)) for v in values]
        assert seen == [4, 3, 2, 1, 0]


def cells(per_site: dict[str, int]) -> list[dict[str, Any]]:
    out, n = [], 0
    for site, count in per_site.items():
        for _ in range(count):
            out.append({"id": f"u{n}", "site": site})
            n += 1
    return out


class TestHeatLayout:
    def test_a_title_a_site_then_its_cells_width_a_line(self) -> None:
        layout = HeatLayout(cells({"s0": 5, "s1": 3}), width=2)
        assert layout.rows == [("s0", -1, -1), ("s0", 0, 2), ("s0", 2, 4), ("s0", 4, 5),
                               ("s1", -1, -1), ("s1", 5, 7), ("s1", 7, 8)]
        assert layout.place[4] == (3, 0)
        assert layout.place[7] == (6, 0)

    def test_rainier_fits_in_sixty_one_lines_a_site_at_130_columns(self) -> None:
        layout = HeatLayout(cells({"s0": 2600, "s1": 2600, "s2": 2600}), width=130)
        assert len(layout.cells) == 7800
        assert len(layout.rows) == 3 * (1 + 20)

    def test_order_is_by_site_then_number_not_by_text(self) -> None:
        rows = [{"id": "u10", "site": "s1"}, {"id": "u9", "site": "s1"}, {"id": "u2", "site": "s0"}]
        assert [c["id"] for c in ordered(rows)] == ["u2", "u9", "u10"]

    def test_up_and_down_keep_the_column_and_step_over_titles(self) -> None:
        layout = HeatLayout(cells({"s0": 5, "s1": 3}), width=2)
        assert layout.move(1, 0, 1) == 3          # u1 -> the line below, same column
        assert layout.move(3, 0, 1) == 4          # short last line: its only cell
        assert layout.move(4, 0, 1) == 5          # over s1's title to its first line
        assert layout.move(5, 0, -1) == 4         # and back
        assert layout.move(0, 0, -1) == 0         # the top stays the top
        assert layout.move(7, 0, 10) == 7         # so does the bottom

    def test_left_and_right_run_through_sites(self) -> None:
        layout = HeatLayout(cells({"s0": 2, "s1": 2}), width=8)
        assert [layout.move(1, 1, 0), layout.move(0, -1, 0), layout.move(3, 5, 0)] == [2, 0, 3]

    def test_empty(self) -> None:
        layout = HeatLayout([], width=10)
        assert (layout.rows, layout.move(0, 1, 0)) == ([], 0)


class TestSpelledToFit:
    @pytest.mark.parametrize(("value", "unit", "spelled"), [
        (6.06573e10, "B/s", "60.7 GB/s"), (2.53e-6, "s", "2.53 µs"), (1.28e11, "B/s", "128 GB/s"),
        (0.0, "B", "0 B"), (None, "B", "-"), (float("nan"), "s", "-"),
    ])
    def test_si_spells_as_flops_does(self, value: float | None, unit: str, spelled: str) -> None:
        """Three significant figures and an SI prefix, as FLOP/s are spelled; unknown is ``-``, never 0."""
        assert si(value, unit) == spelled

    def test_fit_counts_what_it_leaves_out(self) -> None:
        """A header line keeps whole parts and says how many did not fit, never cutting one."""
        parts = ["throttle 197 PF/s", "NeuronLink 62.2 PF/s", "failed chip 52.7 PF/s", "EFA 19.9 PF/s"]
        assert fit("lost: ", parts, 60) == "lost: throttle 197 PF/s, NeuronLink 62.2 PF/s +2 more"
        assert fit("lost: ", parts, 200) == "lost: " + ", ".join(parts)
        assert fit("lost: ", [], 60) == "lost: none"

    @pytest.mark.parametrize(("state", "kw", "word"), [
        ("healthy", {"lost": 13.0, "effective": 87.0}, "losing 13.0%"),
        ("healthy", {"lost": 0.1, "effective": 99.9}, "healthy"),
        ("healthy", {"unhealthy": 1}, "1 part unhealthy"),
        ("cooling_degraded", {"lost": 13.0, "effective": 87.0}, "cooling_degraded"),
        ("healthy", {}, "healthy"),
    ])
    def test_a_state_word_never_contradicts_a_loss(self, state: str, kw: dict[str, Any], word: str) -> None:
        """``healthy`` is never printed beside a 13 % loss or an unhealthy part: the word says what it is."""
        assert state_word(state, **kw) == word

    def test_first_cause_names_only_the_cause(self) -> None:
        """The ``by`` column names the costliest cause; the loss is in the column beside it."""
        assert first_cause({"straggler": 1e12, "degraded_neuronlink": 7e15}) == "NeuronLink"
        assert first_cause({"straggler": 0.0}) == "-"


class TestLabelledMap:
    def test_a_small_fleet_gets_cells_with_names(self) -> None:
        """The demo's two UltraServers are drawn as ``u0`` and ``!u1`` cells, legible; rainier's 7,800 are one
        character each, as before."""
        small = [{"id": f"u{i}", "site": "s0"} for i in range(2)]
        large = [{"id": f"u{i}", "site": f"s{i // 2600}"} for i in range(7800)]
        assert labelled_width(small, 40, 5) == 4
        assert labelled_width([{"id": f"s0/u{i}", "site": "s0"} for i in range(2)], 40, 5) == 4  # site in the title
        assert labelled_width(large, 130, 40) == 1
        layout = HeatLayout(small, 40, labelled_width(small, 40, 5))
        assert (layout.cell_width, layout.width, layout.rows) == (4, 10, [("s0", -1, -1), ("s0", 0, 2)])
