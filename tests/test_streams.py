"""Specification of sequence accounting per stream: gaps are missing, then
lost; a missing frame that arrives late is late, never lost; a restart under
the same id is recognised and counted; duplicates and replays are stale; an
implausible jump is not believed unless the next frame confirms it."""

from __future__ import annotations

import numpy as np

from rainierd.core.streams import WINDOW, Advance, Streams


def feed(streams: Streams, seq: int, t_s: float, *, publisher: int = 0, entity: int = 0) -> Advance:
    """One frame of one stream."""
    return streams.advance(np.array([entity]), np.array([publisher]), np.array([seq], np.uint64), np.array([t_s]))


def tally(advances: list[Advance]) -> dict[str, int]:
    names = ("lost", "late", "restarts", "changes", "stale", "jumps")
    return {name: sum(getattr(a, name) for a in advances) for name in names}


class TestGaps:
    def test_consecutive_frames_lose_nothing(self) -> None:
        """Frames 0..9 in order: all kept, nothing missing or lost."""
        s = Streams(1)
        advances = [feed(s, k, float(k)) for k in range(10)]
        assert all(a.keep.all() for a in advances)
        assert (tally(advances)["lost"], s.missing_count()) == (0, 0)

    def test_a_gap_is_missing_until_the_window_passes(self) -> None:
        """Frames 3 and 4 skipped: missing at once, lost when frame 5 + WINDOW arrives, not a frame before."""
        s = Streams(1)
        for k in (0, 1, 2, 5):
            feed(s, k, float(k))
        assert s.missing_count() == 2
        lost = [feed(s, k, float(k)).lost for k in range(6, 6 + WINDOW)]
        assert lost == [0] * (WINDOW - 2) + [1, 1]
        assert s.missing_count() == 0

    def test_a_gap_wider_than_the_window_counts_the_excess_at_once(self) -> None:
        """1,000 frames skipped: 1,000 - WINDOW lost at once, WINDOW missing."""
        s = Streams(1)
        feed(s, 0, 0.0)
        assert feed(s, 1_001, 1.0).lost == 1_000 - WINDOW
        assert s.missing_count() == WINDOW


class TestLateFrames:
    def test_a_missing_frame_that_arrives_late_is_late_not_lost(self) -> None:
        """Frame 3 after frame 5: late, not applied, and never counted lost."""
        s = Streams(1)
        for k in (0, 1, 2, 4, 5):
            feed(s, k, float(k))
        late = feed(s, 3, 3.0)
        assert (bool(late.keep[0]), late.late, late.stale) == (False, 1, 0)
        advances = [feed(s, k, float(k)) for k in range(6, 6 + 2 * WINDOW)]
        assert (tally(advances)["lost"], s.missing_count()) == (0, 0)

    def test_a_duplicate_or_a_replay_is_stale(self) -> None:
        """A frame already applied, sent again with its old time, is stale; so is one older than the window."""
        s = Streams(1)
        for k in range(40):
            feed(s, k, float(k))
        assert feed(s, 39, 39.0).stale == 1
        assert feed(s, 5, 5.0).stale == 1


class TestRestarts:
    def test_a_restart_under_the_same_id_is_counted_not_rejected(self) -> None:
        """After frame 500 the publisher starts again at 0 with later sample times: kept, one restart, no loss."""
        s = Streams(1)
        for k in range(501):
            feed(s, k, float(k))
        advances = [feed(s, k, 600.0 + k) for k in range(5)]
        assert all(a.keep.all() for a in advances)
        assert tally(advances) == {"lost": 0, "late": 0, "restarts": 1, "changes": 0, "stale": 0, "jumps": 0}

    def test_a_new_publisher_takes_over_without_loss(self) -> None:
        """Another publisher id on the stream starts it over; what the old one had missing is lost."""
        s = Streams(1)
        for k in (0, 1, 3):
            feed(s, k, float(k))
        change = feed(s, 0, 4.0, publisher=7)
        assert (bool(change.keep[0]), change.changes, change.lost) == (True, 1, 1)

    def test_streams_are_independent(self) -> None:
        """One stream's restart and gaps touch no other stream."""
        s = Streams(2)
        both = s.advance(np.array([0, 1]), np.array([0, 0]), np.array([10, 10], np.uint64), np.array([1.0, 1.0]))
        assert both.keep.all()
        feed(s, 0, 5.0, entity=0)  # stream 0 restarts
        feed(s, 13, 2.0, entity=1)  # stream 1 skips two
        assert (s.seq.tolist(), s.missing_count()) == ([0, 13], 2)


class TestJumps:
    def test_one_implausible_jump_changes_nothing(self) -> None:
        """A bit flip sends seq from 10 to 10 + 10**6: a jump, nothing lost; the next genuine one applies."""
        s = Streams(1, max_jump=1_000)
        for k in range(11):
            feed(s, k, float(k))
        jump = feed(s, 10 + 10**6, 11.0)
        assert (bool(jump.keep[0]), jump.jumps, jump.lost) == (False, 1, 0)
        assert (int(s.seq[0]), s.missing_count()) == (10, 0)
        after = [feed(s, k, float(k)) for k in range(11, 11 + 2 * WINDOW)]
        assert all(a.keep.all() for a in after)
        assert tally(after) == {"lost": 0, "late": 0, "restarts": 0, "changes": 0, "stale": 0, "jumps": 0}

    def test_the_largest_sequence_numbers_are_not_believed(self) -> None:
        """seq = 2**63 and 2**64 - 1 after a genuine 5: jumps, never a loss of quintillions."""
        s = Streams(1)
        feed(s, 5, 5.0)
        assert [feed(s, seq, 6.0).jumps for seq in (2**63, 2**64 - 1)] == [1, 1]
        assert feed(s, 6, 6.0).keep.all()
        assert int(s.seq[0]) == 6

    def test_a_jump_the_next_frame_confirms_is_believed(self) -> None:
        """A stream that really moved on (a monitor away longer than max_jump frames) is followed from the
        second frame there: what it skipped is lost, but for the rejected first frame; counted as a restart."""
        s = Streams(1, max_jump=1_000)
        feed(s, 10, 10.0)
        first = feed(s, 50_000, 11.0)
        second = feed(s, 50_001, 12.0)
        assert (first.jumps, bool(first.keep[0])) == (1, False)
        assert (bool(second.keep[0]), second.restarts, second.lost) == (True, 1, 50_001 - 10 - 2)
        assert feed(s, 50_002, 13.0).keep.all()

    def test_old_frames_do_not_confirm_a_jump(self) -> None:
        """Two consecutive far-ahead frames sampled before the last one applied (an old process still
        running under the same id) are both refused: a jump is believed only with newer samples."""
        s = Streams(1, max_jump=1_000)
        feed(s, 2, 201.0)
        assert [feed(s, seq, t).jumps for seq, t in ((1_000_001, 101.0), (1_000_002, 102.0))] == [1, 1]
        assert (int(s.seq[0]), float(s.t_s[0])) == (2, 201.0)

    def test_a_jump_within_the_bound_is_an_ordinary_gap(self) -> None:
        """max_jump frames skipped is believed: counted missing, then lost, as any gap."""
        s = Streams(1, max_jump=1_000)
        feed(s, 0, 0.0)
        gap = feed(s, 1_001, 1.0)
        assert (bool(gap.keep[0]), gap.jumps, gap.lost) == (True, 0, 1_000 - WINDOW)
