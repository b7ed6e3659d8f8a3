"""The coordinator's eviction decisions and the dispatcher's alive window (tickwheel/core/liveness.py): two
refusals evict a gone process, seconds of silence evict a stopped one, and nothing the prober cannot vouch for
(its own stall, a gap, an unreachable network, an answer in between) counts towards an eviction."""

from __future__ import annotations

from tickwheel.core.liveness import (
    Answer,
    EvictionPolicy,
    MemberRecord,
    Probe,
    alive_within,
    observe,
    window_is_safe,
)

POLICY = EvictionPolicy(refusals=2, silent_s=3.0, timeout_s=1.0, stall_slack_s=1.0)


def run(*probes: tuple[Answer, float, float], policy: EvictionPolicy = POLICY) -> list[bool]:
    """Fold the probes (answer, sent, done) into one member's record; each probe's verdict."""
    record, verdicts = MemberRecord(), []
    for answer, sent, done in probes:
        record, evict = observe(record, Probe(answer, sent, done), policy)
        verdicts.append(evict)
    return verdicts


def silent(sent: float) -> tuple[Answer, float, float]:
    return Answer.SILENT, sent, sent + 1.0


def test_two_refusals_in_a_row_evict_and_an_answer_resets_them() -> None:
    assert run((Answer.REFUSED, 0, 0.01), (Answer.REFUSED, 0.5, 0.51)) == [False, True]
    refused, answered = (Answer.REFUSED, 0, 0.01), (Answer.ANSWERED, 0.5, 0.51)
    assert run(refused, answered, (Answer.REFUSED, 1, 1.01)) == [False, False, False]


def test_unknown_answers_count_nothing_towards_refusals() -> None:
    unknown = (Answer.UNKNOWN, 0.5, 0.6)
    assert run((Answer.REFUSED, 0, 0.01), unknown, unknown, (Answer.REFUSED, 1, 1.01)) == [False, False, False, True]


def test_silence_evicts_once_it_has_lasted_the_threshold_from_the_first_unanswered_probe() -> None:
    # probes every second (each waits its 1 s timeout): sent at 0, 1, 2 -> done at 1, 2, 3
    assert run(silent(0), silent(1), silent(2)) == [False, False, True]


def test_an_answer_in_between_restarts_the_silence() -> None:
    assert run(silent(0), silent(1), (Answer.ANSWERED, 2, 2.1), silent(2.5), silent(3.5)) == [False] * 5


def test_an_answer_that_overlapped_a_silent_probe_moves_the_silence_start_past_it() -> None:
    # the probe sent at 0 goes unanswered, one sent at 0.5 answered at 0.9: silence counts from 0.9
    record, _ = observe(MemberRecord(), Probe(Answer.ANSWERED, 0.5, 0.9), POLICY)
    record, evict = observe(record, Probe(Answer.SILENT, 0.0, 1.0), POLICY)
    assert record.silent_since_s == 0.9 and not evict
    record, evict = observe(record, Probe(Answer.SILENT, 2.0, 3.0), POLICY)
    assert not evict  # 2.1 s since the answer
    _, evict = observe(record, Probe(Answer.SILENT, 3.0, 4.0), POLICY)
    assert evict


def test_a_silence_measured_across_the_probers_own_stall_proves_nothing() -> None:
    # The coordinator was paused (SIGSTOP, a starved box) with a probe in flight: on resuming its timeout fires at
    # once, 30 s after the send; that is the coordinator's stall, not the member's, and it restarts the count.
    stalled = (Answer.SILENT, 1.0, 31.0)
    assert run(silent(0), stalled, silent(31), silent(32)) == [False, False, False, False]
    assert run(silent(0), stalled, silent(31), silent(32), silent(33)) == [False, False, False, False, True]


def test_silences_seen_with_a_gap_longer_than_the_threshold_are_not_joined() -> None:
    assert run(silent(0), silent(10), silent(11)) == [False, False, False]


def test_an_unknown_answer_restarts_the_silence() -> None:
    assert run(silent(0), silent(1), (Answer.UNKNOWN, 2, 2.1), silent(2.5), silent(3.5)) == [False] * 5


def test_the_alive_window_must_end_before_a_silent_member_is_evicted() -> None:
    assert window_is_safe(1.5, POLICY)  # 1.5 + 0.25 <= 3 - 1
    assert not window_is_safe(2.0, POLICY)
    assert not window_is_safe(5.0, EvictionPolicy(silent_s=3.0, timeout_s=1.0))  # the old half-session window


def test_a_dispatcher_fires_only_within_its_alive_window() -> None:
    assert alive_within(1.4, 1.5)
    assert not alive_within(1.5, 1.5)
    assert not alive_within(15.0, 1.5)  # resumed after a SIGSTOP: confirm again first


def test_the_default_settings_keep_the_alive_window_inside_the_silence() -> None:
    from tickwheel.settings import Settings

    cfg = Settings().coordinator
    policy = EvictionPolicy(silent_s=cfg.member_silent_evict_s, timeout_s=cfg.member_probe_timeout_s)
    assert window_is_safe(Settings().dispatcher.alive_window_s, policy)
    # and the eviction needs several probes in a row: one slow answer never evicts
    assert cfg.member_silent_evict_s >= 3 * max(cfg.member_probe_interval_s, cfg.member_probe_timeout_s)
