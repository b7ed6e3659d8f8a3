"""The peer benchmarks' workload, call mapping, pacing and CPU accounting, and the load tests' mix parser."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import subprocess
import sys
import time
import types
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from benchmarks.peers import compare, harness
from benchmarks.peers.harness import BenchResult, Planned, Workload
from loadtest.common import parse_mix
from tickwheel.dev.checker import Expected, check
from tickwheel.dev.sink import SinkCall

START = datetime(2026, 3, 1, 12, 0, 0, 123_456, tzinfo=UTC)


def test_a_plan_spreads_its_runs_evenly_over_the_window_after_the_lead() -> None:
    plan = Workload(runs=4, window_s=8.0, lead_s=10.0, ahead_s=5.0, tenants=2).plan(START)
    first = START.replace(microsecond=123_000) + timedelta(seconds=10)
    assert [p.due_at for p in plan] == [first + timedelta(seconds=2 * i) for i in range(4)]
    assert [p.submit_at for p in plan] == [p.due_at - timedelta(seconds=5) for p in plan]
    assert [p.tenant for p in plan] == ["t0", "t1", "t0", "t1"]
    assert len({p.run_id for p in plan}) == 4


def test_a_plan_never_hands_a_run_over_before_the_start() -> None:
    plan = Workload(runs=2, window_s=0.0, lead_s=1.0, ahead_s=5.0).plan(START)
    assert all(p.submit_at == p.due_at - timedelta(seconds=1) for p in plan)
    assert plan[0].due_at == plan[1].due_at  # window 0: a burst, all due at once


def test_a_planned_run_survives_its_json_form() -> None:
    run = Workload(runs=1).plan(START)[0]
    assert Planned.from_json(run.to_json()) == run


def sink_call(path: str, webhook_id: str | None, status: int | None = 200) -> SinkCall:
    headers = {"Webhook-Id": webhook_id} if webhook_id else {}
    return SinkCall("POST", path, {}, headers, b"{}", START.timestamp(), status)


def test_sink_calls_under_the_bench_path_become_checker_calls_by_tenant_and_run_id() -> None:
    run_id = uuid.uuid4()
    calls = harness.to_checker_calls(
        [
            sink_call("/bench/t1", str(run_id)),
            sink_call("/bench/t0", "not-a-uuid", status=None),
            sink_call("/elsewhere", str(run_id)),
        ]
    )
    assert [(c.run_id, c.tenant, c.status, c.received_at) for c in calls] == [
        (run_id, "t1", 200, START),
        (None, "t0", 0, START),
    ]


async def test_paced_submission_waits_for_each_submit_instant_and_counts_refusals() -> None:
    now = datetime.now(UTC)
    plan = [Planned(uuid.uuid4(), "t0", now + timedelta(seconds=s + 1), now + timedelta(seconds=s)) for s in (0.0, 0.3)]
    handed: list[float] = []

    async def submit(run: Planned) -> Expected:
        handed.append(time.monotonic())
        if run is plan[1]:
            raise RuntimeError("refused")
        return Expected(run.run_id, run.tenant, run.due_at)

    started = time.monotonic()
    result = await harness.paced_submit(plan, submit)
    assert [e.run_id for e in result.expected] == [plan[0].run_id]
    assert (result.errors, result.late, len(result.latencies_s)) == (1, 0, 1)
    assert handed[1] - started >= 0.29


async def test_a_run_handed_over_after_its_due_instant_counts_as_late() -> None:
    past = datetime.now(UTC) - timedelta(seconds=1)
    plan = [Planned(uuid.uuid4(), "t0", past, past)]

    async def submit(run: Planned) -> Expected:
        return Expected(run.run_id, run.tenant, run.due_at)

    assert (await harness.paced_submit(plan, submit)).late == 1


async def test_waiting_for_deliveries_ends_once_every_run_has_a_2xx_call_however_they_come() -> None:
    runs = [Expected(uuid.uuid4(), "t0", START) for _ in range(3)]
    sink = types.SimpleNamespace(calls=[sink_call("/bench/t0", str(runs[0].run_id))])

    async def deliver_the_rest() -> None:
        await asyncio.sleep(0.6)  # after the first look: the next looks read only what came since
        sink.calls.append(sink_call("/bench/t0", str(runs[1].run_id), status=500))
        await asyncio.sleep(0.6)
        sink.calls += [sink_call("/bench/t0", str(r.run_id)) for r in runs[1:]]

    started = time.monotonic()
    delivering = asyncio.create_task(deliver_the_rest())
    await harness.wait_delivered(sink, runs, datetime.now(UTC) + timedelta(seconds=10))  # type: ignore[arg-type]
    await delivering
    assert 1.1 < time.monotonic() - started < 5.0


async def test_waiting_ends_at_the_first_call_of_a_run_not_meant_to_succeed_as_the_checker_counts_it() -> None:
    failing = Expected(uuid.uuid4(), "t0", START, succeeds=False)
    other_tenant = sink_call("/bench/t1", str(failing.run_id), status=500)  # not a delivery of t0's run
    sink = types.SimpleNamespace(calls=[other_tenant])

    async def fail_it() -> None:
        await asyncio.sleep(0.6)
        sink.calls.append(sink_call("/bench/t0", str(failing.run_id), status=500))

    started = time.monotonic()
    failing_call = asyncio.create_task(fail_it())
    await harness.wait_delivered(sink, [failing], datetime.now(UTC) + timedelta(seconds=10))  # type: ignore[arg-type]
    await failing_call
    assert 0.5 < time.monotonic() - started < 5.0
    report = check([failing], harness.to_checker_calls(sink.calls), now=datetime.now(UTC))
    assert report.delivered == 1 and report.lost == [] and report.cross_tenant == 1


def test_steady_collector_makes_no_full_collection_inside_and_gives_the_thresholds_back() -> None:
    before = gc.get_threshold()
    with harness.steady_collector():
        assert gc.get_threshold()[2] == harness.NO_FULL_COLLECTION
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_cpu_seconds_count_a_process_and_its_children() -> None:
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\ntime.sleep(30)"
    shell = subprocess.Popen(["/bin/sh", "-c", f"{sys.executable} -c '{burn}'"], start_new_session=True)
    try:
        deadline = time.monotonic() + 30  # a loaded box gives the child its 0.3 s of CPU late, not never
        while harness.cpu_seconds([shell.pid]) < 0.25 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert harness.cpu_seconds([shell.pid]) >= 0.25  # the shell itself burns nothing: its child does
        assert harness.cpu_seconds([]) == 0
    finally:
        os.killpg(shell.pid, signal.SIGKILL)  # the group this test started, by its id
        shell.wait()


def result(system: str, runs_per_s: float, p99_s: float, cpu_ms: float) -> BenchResult:
    return BenchResult(
        system, "2026-03-01", {}, 10, 0, 0, {"p99": 0.01}, 10, 0, 0, 0, 0, runs_per_s,
        {"p50": p99_s / 2, "p99": p99_s, "max": p99_s}, 1.0, cpu_ms, 0.0,
    )  # fmt: skip


def test_the_comparison_table_gives_each_figure_as_a_ratio_to_the_first_system() -> None:
    table = compare.markdown([result("tickwheel", 30.0, 0.5, 20.0), result("celery", 30.0, 0.05, 5.0)])
    celery = table.splitlines()[3]
    assert "| celery | 10/10 | 0 | 0 | 30.0 (x1.00) |" in celery
    assert "50 ms (x0.10)" in celery
    assert "5.00 (x0.25)" in celery


def test_the_load_mix_reads_weights_and_refuses_unknown_operations() -> None:
    assert parse_mix("create=3, get=5,list,patch=0") == {"create": 3, "get": 5, "list": 1, "patch": 0}
    with pytest.raises(ValueError, match="delete"):
        parse_mix("delete=1")


def test_a_server_kind_with_nothing_running_in_the_stack_is_an_error_not_zero_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # started from a directory whose .stack holds no servers, arq's Redis counted 0.0 s (session 24)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RuntimeError, match="no redis"):
        harness.stack_server_pids("redis")
