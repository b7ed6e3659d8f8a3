"""The worker against the real servers and a local sink: outcomes, retries, signatures, dead letters."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from datetime import UTC, datetime, timedelta

from schemas.messages import HttpTarget, RetryDoc, decode_alert, decode_due_run, topic_names
from tests.integration.worker.conftest import Scene, eventually
from tickwheel.bus.kafka import OFFSET_BEGINNING, KafkaConsumer
from tickwheel.bus.near import near_partition_of
from tickwheel.core.ids import minute_bucket
from tickwheel.dev.sink import SinkCall
from tickwheel.store import runs
from tickwheel.store.runs import NewRun


def standard_webhooks_valid(secret: str, call: SinkCall) -> bool:
    """An independent Standard Webhooks check (hmac/base64 by hand, no tickwheel code)."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    msg_id, stamp = call.header("webhook-id"), call.header("webhook-timestamp")
    signed = f"{msg_id}.{stamp}.".encode() + call.body
    expected = "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    fresh = abs(time.time() - int(stamp or 0)) < 300
    return fresh and any(hmac.compare_digest(expected, s) for s in (call.header("webhook-signature") or "").split())


async def test_a_run_is_called_once_signed_and_recorded_succeeded(scene: Scene) -> None:
    await scene.worker()
    run = await scene.job(HttpTarget(url=scene.sink.url("/ok"), headers={"X-Job": "mine", "Idempotency-Key": "no"}))
    [call] = await scene.sink.wait_for("/ok", 1)
    row = await scene.wait_status(run.run_id, "SUCCEEDED")
    assert call.method == "POST"
    assert call.body == b'{"hello": "world"}'
    assert call.header("Idempotency-Key") == str(run.run_id)
    assert call.header("webhook-id") == str(run.run_id)
    assert call.header("X-Tickwheel-Attempt") == "1"
    assert call.header("X-Job") == "mine"
    assert (call.header("traceparent") or "").startswith(f"00-{run.run_id.hex}-")
    assert standard_webhooks_valid(scene.secrets[0], call)
    assert (row.attempt, row.response_code, row.worker) == (1, 200, scene.workers[0].id)
    [attempt] = await runs.get_attempts(scene.store, run.run_id)
    assert (attempt.outcome, attempt.response_code, attempt.response_excerpt) == ("SUCCEEDED", 200, "ok")
    history = await scene.store.execute(
        "SELECT run_id, status, attempt FROM runs_by_job WHERE job_id = ?", [run.job_id]
    )
    assert history == [{"run_id": run.run_id, "status": "SUCCEEDED", "attempt": 1}]
    job = await scene.store.execute("SELECT last_run_id FROM jobs WHERE job_id = ?", [run.job_id])
    assert job == [{"last_run_id": None}]  # no second source of truth written per run
    assert scene.sink.calls_to("/ok") == [call]


async def test_a_500_is_retried_as_a_new_run_row_and_then_succeeds_with_the_same_webhook_id(scene: Scene) -> None:
    await scene.worker()
    run = await scene.job(HttpTarget(url=scene.sink.url("/flaky", seq="500,200")))
    calls = await scene.sink.wait_for("/flaky", 2)
    row = await scene.wait_status(run.run_id, "SUCCEEDED")
    assert [c.status for c in calls] == [500, 200]
    assert {c.header("webhook-id") for c in calls} == {str(run.run_id)}
    assert [c.header("X-Tickwheel-Attempt") for c in calls] == ["1", "2"]
    assert row.attempt == 2
    outcomes = [(a.attempt, a.outcome, a.response_code) for a in await runs.get_attempts(scene.store, run.run_id)]
    assert outcomes == [(1, "RETRY", 500), (2, "SUCCEEDED", 200)]
    retries = [d for d in scene.firer.fired if d.run_id == run.run_id]
    assert [(d.kind, d.attempt) for d in retries if d.kind == "run"] == [("run", 0), ("run", 1)]


async def test_a_404_is_dead_at_once_with_a_dead_letter_and_a_signed_owner_alert(scene: Scene) -> None:
    await scene.worker()
    run = await scene.job(
        HttpTarget(url=scene.sink.url("/missing", status=404)), alert_url=scene.sink.url("/alerts"), payload='{"n": 7}'
    )
    row = await scene.wait_status(run.run_id, "DEAD")
    assert row.response_code == 404 and "HTTP 404" in (row.last_error or "")
    [letter] = await eventually(
        lambda: scene.store.execute("SELECT * FROM dead_letters WHERE tenant_id = ?", [scene.tenant]), bool
    )
    assert (letter["run_id"], letter["payload"], letter["target_host"]) == (run.run_id, b'{"n": 7}', "127.0.0.1")
    assert '"response_code": 404' in letter["attempts"]
    [alert_call] = await scene.sink.wait_for("/alerts", 1)
    alert = decode_alert(alert_call.body)
    assert (alert.type, alert.run_id, alert.attempts) == ("run.dead", run.run_id, 1)
    assert standard_webhooks_valid(scene.secrets[0], alert_call)
    assert len(scene.sink.calls_to("/missing")) == 1


async def test_a_429_retry_waits_at_least_its_retry_after(scene: Scene) -> None:
    await scene.worker()
    run = await scene.job(HttpTarget(url=scene.sink.url("/busy", seq="429,200", retry_after="2")))
    [first] = await scene.sink.wait_for("/busy", 1)
    row = await scene.wait_status(run.run_id, "RETRY", "SUCCEEDED")
    if row.status == "RETRY":  # read before the retry ran (a loaded box may read it only once it succeeded)
        retry_after = datetime.fromtimestamp(first.received_at, UTC) + timedelta(seconds=2)
        assert row.due_at is not None and row.due_at >= retry_after - timedelta(milliseconds=10)
    calls = await scene.sink.wait_for("/busy", 2)
    await scene.wait_status(run.run_id, "SUCCEEDED")
    assert calls[1].received_at - first.received_at >= 2.0
    retry = next(d for d in scene.firer.fired if d.run_id == run.run_id and d.attempt == 1)
    assert retry.fire_at_ms / 1000 >= first.received_at + 2.0 - 0.01


async def test_a_call_that_times_out_is_retried_then_dead_when_attempts_run_out(scene: Scene) -> None:
    await scene.worker()
    retry = RetryDoc(max_attempts=2, base_delay_s=0.1, max_delay_s=0.1, jitter=0.0)
    run = await scene.job(HttpTarget(url=scene.sink.url("/slow", delay_ms=1500), timeout_s=0.3), retry=retry)
    row = await scene.wait_status(run.run_id, "DEAD")
    attempts = await runs.get_attempts(scene.store, run.run_id)
    assert [(a.outcome, (a.error or "").split(":")[0]) for a in attempts] == [("RETRY", "timeout"), ("DEAD", "timeout")]
    assert "max_attempts 2" in (row.last_error or "")
    assert row.response_code is None


async def test_a_redirect_is_not_followed_and_counts_as_a_failure(scene: Scene) -> None:
    await scene.worker()
    run = await scene.job(HttpTarget(url=scene.sink.url("/moved", redirect=scene.sink.url("/elsewhere"))))
    row = await scene.wait_status(run.run_id, "DEAD")
    assert row.response_code == 302
    assert len(scene.sink.calls_to("/moved")) == 1
    assert scene.sink.calls_to("/elsewhere") == []


async def test_a_connection_reset_is_retried(scene: Scene) -> None:
    await scene.worker()
    retry = RetryDoc(max_attempts=2, base_delay_s=0.1, max_delay_s=0.1, jitter=0.0)
    run = await scene.job(HttpTarget(url=scene.sink.url("/reset", reset=1)), retry=retry)
    await scene.wait_status(run.run_id, "DEAD")
    attempts = await runs.get_attempts(scene.store, run.run_id)
    assert [(a.error or "").split(":")[0] for a in attempts] == ["connection_error", "connection_error"]
    assert len(scene.sink.calls_to("/reset")) == 2


async def near_messages(scene: Scene, run: NewRun, wanted: set[tuple[str, int]]) -> set[tuple[str, int]]:
    """The (kind, attempt) of `run`'s messages on its near-term partition, read until `wanted` are among them."""
    near = topic_names(scene.settings.kafka.topic_prefix)["near"]
    partition = near_partition_of(run.shard, scene.settings.kafka.near_partitions, scene.settings.shards)
    consumer = KafkaConsumer(scene.settings.kafka)
    await consumer.assign([(near, partition, OFFSET_BEGINNING)])
    seen: set[tuple[str, int]] = set()

    async def read() -> set[tuple[str, int]]:
        due = [decode_due_run(r.value) for r in await consumer.poll(50, 0.3)]
        seen.update((d.kind, d.attempt) for d in due if d.run_id == run.run_id)
        return seen

    try:
        return set(await eventually(read, lambda s: wanted <= s))
    finally:
        await consumer.close()


async def test_retry_rows_and_short_lease_checks_are_announced_on_the_near_term_topic(scene: Scene) -> None:
    # A lease shorter than a minute may fall in a minute the dispatchers' rescan already read: announced.
    await scene.worker(lease_s=5, lease_margin_s=1.0)
    run = await scene.job(HttpTarget(url=scene.sink.url("/announced", seq="503,200"), timeout_s=2.0))
    await scene.wait_status(run.run_id, "SUCCEEDED")
    await near_messages(scene, run, {("lease_check", 1), ("run", 1), ("lease_check", 2)})
    retry_row = next(d for d in scene.firer.fired if d.run_id == run.run_id and d.attempt == 1 and d.kind == "run")
    assert retry_row.fire_at_ms > retry_row.scheduled_at_ms


async def test_a_lease_check_a_minute_or_more_ahead_is_left_to_the_rescan(scene: Scene) -> None:
    await scene.worker()  # lease 60 s: its row falls in a minute whose rescan comes after the claim
    run = await scene.job(HttpTarget(url=scene.sink.url("/quiet", seq="503,200")))
    await scene.wait_status(run.run_id, "SUCCEEDED")
    # The claim's lease check would have been announced before the retry row (same partition, earlier offset).
    seen = await near_messages(scene, run, {("run", 1)})
    assert "lease_check" not in {kind for kind, _ in seen}


async def test_a_stored_job_with_a_framing_header_is_refused_at_call_time_not_sent(scene: Scene) -> None:
    await scene.worker()
    smuggler = HttpTarget(url=scene.sink.url("/smuggle"), headers={"Transfer-Encoding": "chunked"})
    run = await scene.job(smuggler)  # written straight to the store, as a job from before the API refused it
    row = await scene.wait_status(run.run_id, "DEAD")
    assert (row.last_error or "").startswith("invalid_target: header 'Transfer-Encoding' controls the connection")
    assert scene.sink.calls_to("/smuggle") == []


async def test_a_run_that_finished_leaves_no_lease_check_row_behind(scene: Scene) -> None:
    await scene.worker()  # lease 60 s: the row is due a minute after the claim
    run = await scene.job(HttpTarget(url=scene.sink.url("/finished")))
    row = await scene.wait_status(run.run_id, "SUCCEEDED")
    started = row.started_at
    assert started is not None
    kinds = set()
    for minute in (started + timedelta(minutes=m) for m in range(6)):  # the lease is a minute or a few
        rows = await scene.store.execute(
            "SELECT run_id, attempt, kind FROM runs_by_bucket WHERE bucket = ? AND shard = ?",
            [minute_bucket(minute).replace(tzinfo=None), run.shard],
        )
        kinds |= {(r["kind"], r["attempt"]) for r in rows if r["run_id"] == run.run_id}
    assert ("lease_check", 1) not in kinds  # deleted with the outcome: no wheel entry, no read of the run
