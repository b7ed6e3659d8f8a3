"""The end-to-end checker finds each kind of fault it reports."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from tickwheel.dev.checker import Call, Expected, check

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
