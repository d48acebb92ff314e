"""Specification of sequence accounting per stream: gaps are missing, then
lost; a missing frame that arrives late is late, never lost; a restart under
the same id is recognised and counted; duplicates and replays are stale; an
implausible jump, a sample time far ahead and another publisher while the
stream's own is live are not believed until CONFIRM consecutive frames
confirm them; a renumber counts only the loss its time could hold; each frame that continues its stream
closes a sample interval (what the stream's period is learned from)."""

from __future__ import annotations

import numpy as np

from rainierd.core.streams import CONFIRM, TAKEOVER_SILENCE_TICKS, WINDOW, Advance, Streams


def feed(streams: Streams, seq: int, t_s: float, *, publisher: int = 0, entity: int = 0,
         rx_s: float | None = None, lag_s: float = 0.0, shed: int = 0) -> Advance:
    """One frame of one stream, received at ``rx_s`` (its sample time unless said) ``lag_s`` after its sample,
    ``shed`` of its stream's frames refused by the inbox before it."""
    rx = t_s if rx_s is None else rx_s
    return streams.advance(np.array([entity]), np.array([publisher]), np.array([seq], np.uint64), np.array([t_s]),
                           rx_s=np.array([rx]), wall_s=np.array([rx + lag_s]), shed=np.array([float(shed)]))


def tally(advances: list[Advance]) -> dict[str, int]:
    names = ("lost", "late", "restarts", "changes", "stale", "jumps", "time_jumps", "unconfirmed")
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
        """1,000 frames skipped over 1,001 s: 1,000 - WINDOW lost at once, WINDOW missing."""
        s = Streams(1)
        feed(s, 0, 0.0)
        assert feed(s, 1_001, 1_001.0).lost == 1_000 - WINDOW
        assert s.missing_count() == WINDOW


class TestSilentStreams:
    """A stream that stops (its publisher ended or moved on) leaves nothing missing for ever: once it has applied
    nothing for WINDOW ticks of listening, what it still misses is lost, once."""

    def test_a_stream_silent_for_the_window_counts_its_missing_lost(self) -> None:
        """Frames 3 and 4 skipped, then the publisher stops at frame 5: still missing a tick before the window,
        lost at it, and never again."""
        s = Streams(1, tick_s=0.5)
        for k in (0, 1, 2, 5):
            feed(s, k, float(k), rx_s=k * 0.5)
        heard = 2.5
        assert s.expire(heard + WINDOW * 0.5 - 0.5) == 0
        assert s.missing_count() == 2
        assert s.expire(heard + WINDOW * 0.5) == 2
        assert (s.missing_count(), s.expire(heard + 10 * WINDOW)) == (0, 0)

    def test_a_frame_after_expiry_is_stale_never_counted_twice(self) -> None:
        """Frame 3, expired as lost, arrives after all: refused stale, not late (it is already counted)."""
        s = Streams(1)
        for k in (0, 1, 2, 4):
            feed(s, k, float(k))
        assert s.expire(4.0 + WINDOW) == 1
        advance = feed(s, 3, 3.0, rx_s=4.0 + WINDOW + 1)
        assert (advance.keep.any(), advance.late, advance.stale, advance.lost) == (False, 0, 1, 0)

    def test_only_the_silent_stream_expires(self) -> None:
        """Two streams with a gap each; the one still publishing keeps its missing frame for the window."""
        s = Streams(2)
        for k in (0, 2):
            feed(s, k, float(k), entity=0)
            feed(s, k, float(k), entity=1)
        for k in range(3, 3 + WINDOW - 2):
            feed(s, k, float(k), entity=1)
        assert s.expire(2.0 + WINDOW) == 1
        assert s.missing_count() == 1

    def test_a_restored_stream_is_silent_from_the_restart(self) -> None:
        """After a restore the listening clock starts at 0: a restored gap waits WINDOW ticks from there."""
        s = Streams(1)
        for k in (0, 2):
            feed(s, k, 1_000.0 + k)
        restored = Streams(1)
        restored.restore(s.arrays())
        assert restored.expire(WINDOW - 1.0) == 0
        assert restored.expire(float(WINDOW)) == 1


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
        assert tally(advances) == {"lost": 0, "late": 0, "restarts": 1, "changes": 0, "stale": 0, "jumps": 0,
                                   "time_jumps": 0, "unconfirmed": 0}

    def test_a_new_publisher_takes_over_a_silent_stream_at_once(self) -> None:
        """Another publisher id on a stream whose own has been silent for TAKEOVER_SILENCE_TICKS starts it over
        at once (a fail-over); what the old one had missing is lost."""
        s = Streams(1)
        for k in (0, 1, 3):
            feed(s, k, float(k))
        change = feed(s, 0, 3.0 + TAKEOVER_SILENCE_TICKS, publisher=7)
        assert (bool(change.keep[0]), change.changes, change.lost) == (True, 1, 1)

    def test_a_new_publisher_on_a_live_stream_waits_for_confirmation(self) -> None:
        """While the stream's own publisher is live, another's frames are publisher_unconfirmed until CONFIRM of
        them come in a row over (CONFIRM - 1) half-ticks: the last of them takes the stream, nothing lost."""
        s = Streams(1)
        for k in range(5):
            feed(s, k, float(k))
        held = [feed(s, k, 4.5 + k / 2, publisher=7) for k in range(CONFIRM)]
        assert [bool(a.keep[0]) for a in held] == [False] * (CONFIRM - 1) + [True]
        assert tally(held) == {"lost": 0, "late": 0, "restarts": 0, "changes": 1, "stale": 0, "jumps": 0,
                               "time_jumps": 0, "unconfirmed": CONFIRM - 1}

    def test_one_intruder_frame_between_genuine_ones_never_takes_the_stream(self) -> None:
        """An intruder's frame after each genuine one: every intruder frame is refused, every genuine applied."""
        s = Streams(1)
        genuine, intruder = [], []
        for k in range(20):
            genuine.append(feed(s, k, float(k)))
            intruder.append(feed(s, 10**6 + k, k + 0.5, publisher=9))
        assert all(a.keep.all() for a in genuine)
        assert not any(a.keep.any() for a in intruder)
        assert (tally(intruder)["unconfirmed"], tally(genuine)["lost"], int(s.publisher[0])) == (20, 0, 0)

    def test_streams_are_independent(self) -> None:
        """One stream's restart and gaps touch no other stream."""
        s = Streams(2)
        one = np.array([1.0, 1.0])
        both = s.advance(np.array([0, 1]), np.array([0, 0]), np.array([10, 10], np.uint64), one, rx_s=one,
                         wall_s=one)
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
        assert tally(after) == {"lost": 0, "late": 0, "restarts": 0, "changes": 0, "stale": 0, "jumps": 0,
                                "time_jumps": 0, "unconfirmed": 0}

    def test_the_largest_sequence_numbers_are_not_believed(self) -> None:
        """seq = 2**63 and 2**64 - 1 after a genuine 5: jumps, never a loss of quintillions."""
        s = Streams(1)
        feed(s, 5, 5.0)
        assert [feed(s, seq, 6.0).jumps for seq in (2**63, 2**64 - 1)] == [1, 1]
        assert feed(s, 6, 6.0).keep.all()
        assert int(s.seq[0]) == 6

    def test_a_confirmed_renumber_after_two_to_the_63_counts_no_impossible_loss(self) -> None:
        """The issue's attack, carried on: seq 2**63, 2**63 + 1, 2**63 + 2 a tick apart after a genuine 5 at
        t 5: the first CONFIRM - 1 are seq_jump, the third is believed (a restart) and counts lost only the
        frames the 1 s before the first could hold: none, never 9.2e18."""
        s = Streams(1)
        feed(s, 5, 5.0)
        advances = [feed(s, 2**63 + k, 6.0 + k) for k in range(CONFIRM)]
        assert [bool(a.keep[0]) for a in advances] == [False] * (CONFIRM - 1) + [True]
        assert tally(advances) == {"lost": 0, "late": 0, "restarts": 1, "changes": 0, "stale": 0,
                                   "jumps": CONFIRM - 1, "time_jumps": 0, "unconfirmed": 0}
        assert isinstance(advances[-1].lost, int)

    def test_two_frames_do_not_confirm_a_jump(self) -> None:
        """seq 2**63 then 2**63 + 1 (the issue's "confirmed renumber"): both refused, nothing lost, and the
        genuine stream goes on."""
        s = Streams(1)
        feed(s, 5, 5.0)
        pair = [feed(s, 2**63, 6.0), feed(s, 2**63 + 1, 7.0)]
        genuine = [feed(s, k, float(k)) for k in range(6, 6 + 2 * WINDOW)]
        assert (tally(pair)["jumps"], tally(pair)["lost"] + tally(genuine)["lost"]) == (2, 0)
        assert all(a.keep.all() for a in genuine)

    def test_one_frame_two_to_the_16_ahead_counts_nothing_lost(self) -> None:
        """seq + 2**16 a tick after the last: a gap its second cannot hold, refused (seq_jump), nothing lost
        (main counted 65,535), and the genuine next frame applies."""
        s = Streams(1)
        for k in range(10):
            feed(s, k, float(k))
        jump = feed(s, 9 + 2**16, 10.0)
        after = [feed(s, k, float(k)) for k in range(10, 10 + 2 * WINDOW)]
        assert (bool(jump.keep[0]), jump.jumps, jump.lost + tally(after)["lost"]) == (False, 1, 0)

    def test_a_frame_far_ahead_in_seq_and_time_neither_counts_loss_nor_silences_the_node(self) -> None:
        """seq + 50,000 with t_s + 200 s (received now): sampled 200 s ahead of the node's own clock, refused
        (time_jump), nothing lost (main counted 51,200), and the genuine frames after it apply (main: stale_seq
        for 200 s)."""
        s = Streams(1)
        for k in range(10):
            feed(s, k, float(k), lag_s=0.05)
        forged = feed(s, 9 + 50_000, 209.0, rx_s=9.5, lag_s=0.05 - 199.5)
        after = [feed(s, k, float(k), lag_s=0.05) for k in range(10, 10 + 2 * WINDOW)]
        assert (bool(forged.keep[0]), forged.time_jumps, forged.lost) == (False, 1, 0)
        assert all(a.keep.all() for a in after)
        assert (tally(after)["stale"], tally(after)["lost"]) == (0, 0)

    def test_a_renumber_counts_at_most_what_its_time_could_hold(self) -> None:
        """A publisher that really renumbered 10**6 ahead after 100 s of silence: believed on the CONFIRM-th
        frame, counted lost 99 (what 100 s holds at one a tick), not 10**6."""
        s = Streams(1, max_jump=1_000)
        feed(s, 10, 10.0)
        advances = [feed(s, 10**6 + k, 110.0 + k) for k in range(CONFIRM)]
        assert bool(advances[-1].keep[0])
        assert tally(advances)["lost"] == 99

    def test_a_burst_of_forged_frames_does_not_confirm(self) -> None:
        """CONFIRM consistent far-ahead frames received within one tick (a burst) are all refused."""
        s = Streams(1)
        feed(s, 10, 10.0)
        burst = [feed(s, 10**9 + k, 11.0 + k, rx_s=10.2 + k / 100) for k in range(CONFIRM)]
        assert not any(a.keep.any() for a in burst)
        assert int(s.seq[0]) == 10

    def test_a_genuine_frame_between_candidates_resets_the_count(self) -> None:
        """Far-ahead frames interleaved with the live numbering never add up to a confirmation."""
        s = Streams(1)
        feed(s, 0, 0.0)
        refused = []
        for k in range(1, 3 * CONFIRM):
            refused.append(feed(s, 10**9 + k, k + 0.5, rx_s=k + 0.5))
            feed(s, k, float(k))
        assert tally(refused)["jumps"] == 3 * CONFIRM - 1
        assert int(s.seq[0]) == 3 * CONFIRM - 1

    def test_old_frames_do_not_confirm_a_jump(self) -> None:
        """Far-ahead frames sampled before the last one applied (an old process still running under the same
        id) are all refused while the current process publishes."""
        s = Streams(1, max_jump=1_000)
        feed(s, 2, 201.0)
        old = []
        for k in range(CONFIRM + 2):
            old.append(feed(s, 1_000_001 + k, 101.0 + k, rx_s=202.0 + k, lag_s=100.0))
            feed(s, 3 + k, 202.0 + k)
        assert not any(a.keep.any() for a in old)
        assert (int(s.seq[0]), float(s.t_s[0])) == (CONFIRM + 4, 202.0 + CONFIRM + 1)

    def test_a_jump_within_the_bound_is_an_ordinary_gap(self) -> None:
        """max_jump frames skipped over as many seconds is believed: counted missing, then lost, as any gap."""
        s = Streams(1, max_jump=1_000)
        feed(s, 0, 0.0)
        gap = feed(s, 1_001, 1_001.0)
        assert (bool(gap.keep[0]), gap.jumps, gap.lost) == (True, 0, 1_000 - WINDOW)

    def test_a_lead_the_inbox_shed_explains_is_an_ordinary_gap(self) -> None:
        """A flooding publisher's frames that got through its share lead by the 500 the inbox refused in a tick:
        applied, and the gap counted lost (as the refused frames were), not held as a jump."""
        s = Streams(1)
        feed(s, 0, 0.0)
        through = feed(s, 501, 1.0, shed=500)
        assert (bool(through.keep[0]), through.jumps, through.lost) == (True, 0, 500 - WINDOW)
        assert bool(feed(Streams(1), 0, 0.0).keep[0])
        unexplained = Streams(1)
        feed(unexplained, 0, 0.0)
        assert feed(unexplained, 501, 1.0, shed=100).jumps == 1  # more than was shed: a jump, held

    def test_a_poisoned_first_frame_is_undone_by_the_genuine_stream(self) -> None:
        """A stream's very first frame forged (seq 2**62, t_s + 200 s): the genuine frames are refused at first
        (stale) but CONFIRM of them take the stream back, a restart."""
        s = Streams(1)
        feed(s, 2**62, 200.0, rx_s=0.0, lag_s=-200.0)
        genuine = [feed(s, k, float(k + 1)) for k in range(CONFIRM)]
        assert [bool(a.keep[0]) for a in genuine] == [False] * (CONFIRM - 1) + [True]
        assert (int(s.seq[0]), tally(genuine)["restarts"]) == (CONFIRM - 1, 1)


class TestReceiveOffset:
    def test_excess_lag_is_measured_against_each_streams_own_floor(self) -> None:
        """Two streams whose clocks are 1.5 s apart show no excess; both delayed by 4 s show 4 s each."""
        s = Streams(2)
        two = np.array([0, 1])
        for k in range(5):
            t = np.array([float(k), float(k)])
            a = s.advance(two, np.zeros(2, np.int64), np.array([k, k], np.uint64), t, rx_s=t,
                          wall_s=t + np.array([1.5, -1.5]))
        assert np.allclose(a.excess_lag_s, 0.0, atol=0.02)
        t = np.array([5.0, 5.0])
        late = s.advance(two, np.zeros(2, np.int64), np.array([5, 5], np.uint64), t, rx_s=t + 4,
                         wall_s=t + 4 + np.array([1.5, -1.5]))
        assert np.allclose(late.excess_lag_s, 4.0, atol=0.02)


class TestIntervals:
    def test_an_interval_is_the_sample_time_over_the_frames_it_held(self) -> None:
        """A frame after two lost ones, 15 s on, closes a 5 s interval; a stream's first frame, a restart and a
        frame refused close none."""
        s = Streams(1)
        intervals = [float(feed(s, seq, t_s).interval_s[0]) for seq, t_s in ((0, 100.0), (1, 105.0), (4, 120.0),
                                                                             (0, 121.0), (0, 121.0))]
        assert np.isnan(intervals[0])
        assert intervals[1:3] == [5.0, 5.0]
        assert np.isnan(intervals[3:]).all()
