"""The overload benchmark's reading of its answers: goodput, shares, and when the API counts as recovered."""

from __future__ import annotations

from benchmarks.overload_bench import Answer, Phase, recovered_after_s, shed_by_reason, summary


def phase(statuses: list[int], took_s: float = 0.05, rate: float = 10.0) -> Phase:
    answers = [Answer(i / rate, status, took_s) for i, status in enumerate(statuses)]
    return Phase("after", rate, len(statuses) / rate, answers)


def test_recovery_starts_at_the_first_window_from_which_every_window_is_good() -> None:
    # 5 s windows of 50 requests: timeouts, one good window, one with a 503, then good ones
    statuses = [0] * 50 + [201] * 50 + [201] * 49 + [503] + [201] * 100
    assert recovered_after_s(phase(statuses)) == 15.0


def test_an_api_whose_answers_stay_slow_never_recovers() -> None:
    assert recovered_after_s(phase([201] * 100, took_s=1.5)) is None


def test_the_summary_counts_goodput_and_shares() -> None:
    found = summary(phase([201] * 6 + [503] * 2 + [0, -1]))
    assert (found["ok"], found["goodput_per_s"], found["shed_503"], found["timed_out"], found["other"]) == (
        6, 6.0, 0.2, 0.1, 0.1,
    )


def test_shed_counts_are_read_by_reason_from_the_exposition() -> None:
    text = 'tickwheel_api_shed_total{reason="waited"} 12.0\ntickwheel_api_shed_created{reason="waited"} 1.7e9\n'
    assert shed_by_reason(text) == {"waited": 12}
