"""Asynchronous completion on the real servers: a job's target answers 202 and the run stays RUNNING under the
job's lease; the outcome reported later (fenced into the run row, as POST /v1/runs/{id}/complete does) is
recorded by a worker through the ordinary path; a lease that passes without a report times out into the retry
policy."""

from __future__ import annotations

from datetime import timedelta

from schemas.messages import AsyncCompletionDoc, CompletionReport, HttpTarget, RetryDoc, encode
from tests.integration.worker.conftest import Scene, eventually, now_utc
from tickwheel.store import runs

TWO_TRIES = RetryDoc(max_attempts=2, base_delay_s=0.2, max_delay_s=0.5, jitter=0.0)


async def report(scene: Scene, run_id: object, attempt: int, outcome: str, detail: str | None = None) -> None:
    held = await scene.run_row(run_id)  # type: ignore[arg-type]
    text = encode(CompletionReport(outcome, detail)).decode()  # type: ignore[arg-type]
    assert (await runs.report_completion(scene.store, held.identity(), attempt, text, now_utc())).applied


async def test_a_202_holds_the_run_until_its_reported_success_is_recorded(scene: Scene) -> None:
    await scene.worker()
    completion = AsyncCompletionDoc(lease_s=300, max_lease_s=900)
    run = await scene.job(HttpTarget(url=scene.sink.url("/later", status=202)), async_completion=completion)
    await scene.sink.wait_for("/later", 1)
    held = await eventually(
        lambda: scene.run_row(run.run_id),
        lambda row: row.lease_until is not None and row.lease_until > now_utc() + timedelta(seconds=200),
    )
    assert (held.status, held.attempt) == ("RUNNING", 1), "the 202 gave the job's lease (300 s), not the call's"
    await report(scene, run.run_id, 1, "succeeded", "42 rows")
    done = await scene.wait_status(run.run_id, "SUCCEEDED")
    assert done.attempt == 1 and len(scene.sink.calls_to("/later")) == 1
    attempts = await runs.get_attempts(scene.store, run.run_id)
    assert [(a.outcome, a.response_excerpt) for a in attempts] == [("SUCCEEDED", "42 rows")]


async def test_a_reported_failure_is_retried_by_the_jobs_policy(scene: Scene) -> None:
    await scene.worker()
    completion = AsyncCompletionDoc(lease_s=300, max_lease_s=900)
    target = HttpTarget(url=scene.sink.url("/flaky-later", seq="202,200"))
    run = await scene.job(target, async_completion=completion, retry=TWO_TRIES)
    await scene.sink.wait_for("/flaky-later", 1)
    await scene.wait_status(run.run_id, "RUNNING")
    await report(scene, run.run_id, 1, "failed", "disk full")
    done = await scene.wait_status(run.run_id, "SUCCEEDED")
    assert done.attempt == 2 and len(scene.sink.calls_to("/flaky-later")) == 2
    attempts = sorted(await runs.get_attempts(scene.store, run.run_id), key=lambda a: a.attempt)
    assert [(a.attempt, a.outcome, a.error) for a in attempts] == [
        (1, "RETRY", "reported failed: disk full"),
        (2, "SUCCEEDED", None),
    ]


async def test_a_lease_without_report_or_heartbeat_times_out_into_the_retry_policy(scene: Scene) -> None:
    await scene.worker()
    completion = AsyncCompletionDoc(lease_s=1, max_lease_s=60)
    run = await scene.job(HttpTarget(url=scene.sink.url("/silent", status=202)), async_completion=completion,
                          retry=TWO_TRIES)  # fmt: skip
    dead = await scene.wait_status(run.run_id, "DEAD", timeout_s=30)
    assert dead.attempt == 2 and dead.last_error == "lease expired"
    assert len(scene.sink.calls_to("/silent")) == 2
    kinds = sorted((a.attempt, a.kind) for a in await runs.get_attempts(scene.store, run.run_id))
    assert kinds == [(1, "lease_expired"), (2, "lease_expired")]


async def test_a_202_of_a_job_that_did_not_opt_in_is_a_success(scene: Scene) -> None:
    await scene.worker()
    run = await scene.job(HttpTarget(url=scene.sink.url("/accepted", status=202)))
    assert (await scene.wait_status(run.run_id, "SUCCEEDED")).response_code == 202
