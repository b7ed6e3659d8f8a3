"""The end-to-end checker finds each kind of fault it reports."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from tickwheel.dev.checker import ApiRequest, Call, Expected, Window, check, check_windows, lag_by_window

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def expected(n: int, tenant: str = "a") -> list[Expected]:
    return [Expected(uuid.uuid4(), tenant, T0 + timedelta(seconds=i)) for i in range(n)]


def call_for(run: Expected, after_s: float = 0.2, status: int = 200, **kw: object) -> Call:
    fields = {"tenant": run.tenant, "signature_valid": True, **kw}
    return Call(run.run_id, received_at=run.due_at + timedelta(seconds=after_s), status=status, **fields)  # type: ignore[arg-type]


def test_every_run_called_once_on_time_is_a_clean_report() -> None:
    runs = expected(10)
    report = check(runs, [call_for(r) for r in runs], now=T0 + timedelta(minutes=1))
    assert report.ok
    assert (report.expected, report.delivered, report.duplicates) == (10, 10, {})
    assert round(report.lag_s["p50"], 3) == 0.2


def test_lag_by_window_puts_each_delivered_run_in_the_window_of_its_due_time_with_the_lag_check_gives_it() -> None:
    runs = expected(30)  # due one a second
    calls = [call_for(r, after_s=0.1) for r in runs[:10]] + [call_for(r, after_s=2.0) for r in runs[10:20]]
    calls += [call_for(runs[20], status=500, after_s=0.2), call_for(runs[20], after_s=0.3)]  # started at its 500
    calls += [call_for(runs[21], after_s=0.5), call_for(runs[21], after_s=9.0)]  # the first of two counts
    calls += [call_for(runs[22], status=500, after_s=0.1)]  # never answered 2xx: lost, in no window
    windows = lag_by_window(runs, calls, 10.0)
    assert [(w["offset_s"], w["runs"]) for w in windows] == [(0.0, 10), (10.0, 10), (20.0, 2)]
    assert [round(w["p99"], 3) for w in windows] == [0.1, 2.0, 0.5]
    assert round(windows[2]["p50"], 3) == 0.35
    report = check(runs, calls, now=T0 + timedelta(minutes=1))
    assert report.delivered == sum(w["runs"] for w in windows)
    assert report.lag_s["max"] == max(w["max"] for w in windows)


def test_a_run_never_answered_2xx_is_lost() -> None:
    runs = expected(3)
    calls = [call_for(runs[0]), call_for(runs[1], status=500)]
    report = check(runs, calls, now=T0 + timedelta(minutes=1))
    assert set(report.lost) == {runs[1].run_id, runs[2].run_id}
    assert not report.ok


def test_runs_not_yet_due_are_not_counted_lost() -> None:
    runs = expected(5)
    report = check(runs, [], now=T0 + timedelta(seconds=1.5))
    assert report.expected == 2


def test_two_successful_calls_of_one_run_are_a_duplicate() -> None:
    runs = expected(1)
    report = check(runs, [call_for(runs[0]), call_for(runs[0], after_s=3)], now=T0 + timedelta(minutes=1))
    assert report.duplicates == {runs[0].run_id: 1}
    assert report.ok  # duplicates are measured, not fatal: at-least-once allows rare ones


def test_early_cross_tenant_and_unsigned_calls_fail_the_report() -> None:
    runs = expected(3)
    calls = [
        call_for(runs[0], after_s=-1),
        call_for(runs[1], tenant="b"),
        call_for(runs[2], signature_valid=False),
    ]
    report = check(runs, calls, now=T0 + timedelta(minutes=1))
    assert report.early == [runs[0].run_id]
    assert (report.cross_tenant, report.invalid_signatures) == (1, 1)
    assert not report.ok


def test_a_failing_target_run_called_at_all_is_delivered_and_must_end_dead() -> None:
    [ok, failing, never_called] = expected(3)
    failing = Expected(failing.run_id, "a", failing.due_at, succeeds=False)
    never_called = Expected(never_called.run_id, "a", never_called.due_at, succeeds=False)
    calls = [call_for(ok), call_for(failing, status=500), call_for(failing, after_s=2, status=500)]
    report = check([ok, failing, never_called], calls, now=T0 + timedelta(minutes=1))
    assert report.lost == [never_called.run_id]
    assert report.duplicates == {}  # retries of a failing target are attempts, not duplicates
    assert (failing.final_status, ok.final_status) == ("DEAD", "SUCCEEDED")


def _soak_history() -> tuple[list[Expected], list[Call], list[Window], dict[uuid.UUID, str], list[ApiRequest]]:
    """Ten runs due one a second; a fault window over seconds 4-7 where every kind of anomaly happens once."""
    runs = expected(10)
    window = Window("kill dispatcher-1", T0 + timedelta(seconds=4), T0 + timedelta(seconds=8))
    calls = [call_for(r, after_s=0.1) for r in runs if r is not runs[4] and r is not runs[6]]
    calls += [
        call_for(runs[5], after_s=3.0),  # a duplicate, 2.9 s after the first call
        call_for(runs[6], after_s=-0.5),  # early
        call_for(runs[7], after_s=0.1, status=500),  # a failed attempt before the success: not a duplicate
    ]
    finals = {r.run_id: "SUCCEEDED" for r in runs} | {runs[4].run_id: "RETRY", runs[9].run_id: "RUNNING"}
    requests = [ApiRequest(T0 + timedelta(seconds=s), failed=s in (5, 12)) for s in range(15)]
    return runs, calls, [window], finals, requests


def test_check_windows_reports_each_anomaly_in_the_window_of_its_run() -> None:
    runs, calls, windows, finals, requests = _soak_history()
    rows = {
        r.window: r for r in check_windows(runs, calls, windows, now=T0 + timedelta(minutes=1), finals=finals,
                                           requests=requests)
    }  # fmt: skip
    assert list(rows) == ["kill dispatcher-1", "steady", "overall"]
    fault, steady, overall = rows["kill dispatcher-1"], rows["steady"], rows["overall"]
    assert fault.report.expected == 4 and steady.report.expected == 6 and overall.report.expected == 10
    assert fault.report.lost == [runs[4].run_id] and steady.report.lost == []
    assert fault.report.duplicates == {runs[5].run_id: 1} and steady.report.duplicates == {}
    assert fault.report.early == [runs[6].run_id]
    assert fault.not_final == [runs[4].run_id] and steady.not_final == [runs[9].run_id]
    assert (fault.api_errors, fault.api_requests) == (1, 4)
    assert (steady.api_errors, steady.api_requests) == (1, 11)
    assert (overall.api_errors, overall.api_requests) == (2, 15)
    assert round(steady.report.lag_s["max"], 3) == 0.1
    assert round(overall.report.lag_s["p50"], 3) == 0.1
    assert fault.row().startswith("| kill dispatcher-1 | 4 | 1 | 1 | 1 |")
    assert fault.row().endswith("| 1 | 1/4 |")


def test_a_run_due_in_a_window_and_called_after_it_shows_its_lag_there() -> None:
    [run] = expected(1)
    window = Window("stop cassandra-2", T0 - timedelta(seconds=1), T0 + timedelta(seconds=1))
    [fault, steady, overall] = check_windows(
        [run], [call_for(run, after_s=4.5)], [window], now=T0 + timedelta(minutes=1),
        finals={run.run_id: "SUCCEEDED"}, requests=[],
    )  # fmt: skip
    assert fault.report.lag_s["p99"] == 4.5 and steady.report.expected == 0
    assert steady.report.lag_s == {} and steady.row().startswith("| steady | 0 | 0 | 0 | 0 | - | - | - |")
    assert overall.report.delivered == 1


def test_by_fault_the_repeats_of_a_fault_are_one_row_whichever_node_they_hit() -> None:
    runs = expected(10)
    windows = [
        Window("SIGKILL worker-1", T0, T0 + timedelta(seconds=2), "kill-worker"),
        Window("stop cassandra-2", T0 + timedelta(seconds=2), T0 + timedelta(seconds=4), "cassandra"),
        Window("SIGKILL worker-2", T0 + timedelta(seconds=6), T0 + timedelta(seconds=8), "kill-worker"),
    ]
    calls = [call_for(r, after_s=3.0 if i == 7 else 0.1) for i, r in enumerate(runs)]
    reports = check_windows(
        runs, calls, windows, now=T0 + timedelta(minutes=1), finals={}, requests=[], by_fault=True
    )
    assert [r.window for r in reports] == ["kill-worker x2", "cassandra x1", "steady", "overall"]
    [worker, cassandra, steady, _] = reports
    assert (worker.report.expected, cassandra.report.expected, steady.report.expected) == (4, 2, 4)
    assert worker.report.lag_s["max"] == 3.0 and steady.report.lag_s["max"] == 0.1
    assert [r.window for r in check_windows(runs, calls, windows, now=T0, finals={}, requests=[])][:3] == [
        "SIGKILL worker-1", "stop cassandra-2", "SIGKILL worker-2",
    ]  # fmt: skip
