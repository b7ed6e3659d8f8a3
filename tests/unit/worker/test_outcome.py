"""From a call's result to the run's next state (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from schemas.messages import (
    AsyncCompletionDoc,
    CompletionReport,
    HttpTarget,
    JobDefinition,
    KafkaTarget,
    RetryDoc,
    ScheduleDoc,
)
from tickwheel.core.retry import Outcome
from tickwheel.model import retry_policy_of
from tickwheel.store.runs import RunStatus
from worker.outcome import answers_later, body_of, breaker_failure, judge, judge_report
from worker.targets import CallResult

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def definition(target: HttpTarget | KafkaTarget | None = None, **fields: object) -> JobDefinition:
    return JobDefinition(
        schedule=ScheduleDoc(type="once", run_at=NOW.isoformat()),
        target=target or HttpTarget(url="https://example.com/hook"),
        retry_policy=RetryDoc(max_attempts=3, base_delay_s=1.0, jitter=0.0),
        **fields,  # type: ignore[arg-type]
    )


def verdict(result: CallResult, job: JobDefinition | None = None, attempt: int = 1):
    job = job or definition()
    return judge(result, job, retry_policy_of(job), attempt, NOW, NOW, rand=0.0)


def answered(status: int, retry_after: str | None = None, excerpt: bytes = b"") -> CallResult:
    return CallResult(0.0, 0.1, status=status, retry_after=retry_after, excerpt=excerpt)


def test_a_2xx_succeeds_and_keeps_the_excerpt() -> None:
    v = verdict(answered(204, excerpt=b"done"))
    assert v.record.status is RunStatus.SUCCEEDED
    assert (v.record.response_code, v.record.response_excerpt, v.record.error) == (204, "done", None)


def test_a_5xx_retries_after_the_backoff_and_goes_dead_on_the_last_attempt() -> None:
    first = verdict(answered(503))
    assert first.record.status is RunStatus.RETRY
    assert first.record.retry_at == NOW + timedelta(seconds=1)
    last = verdict(answered(503), attempt=3)
    assert last.record.status is RunStatus.DEAD
    assert last.record.error is not None and last.record.error.startswith("HTTP 503; gave up after 3 attempts")


def test_a_429_waits_at_least_its_retry_after() -> None:
    v = verdict(answered(429, retry_after="30"))
    assert v.record.status is RunStatus.RETRY
    assert v.record.retry_at == NOW + timedelta(seconds=30)


def test_a_redirect_and_a_404_are_permanent() -> None:
    assert verdict(answered(302)).record.status is RunStatus.DEAD
    assert verdict(answered(404)).record.status is RunStatus.DEAD


def test_success_codes_of_the_job_decide_what_succeeds() -> None:
    job = definition(HttpTarget(url="https://example.com/", success_codes=[202]))
    assert verdict(answered(202), job).record.status is RunStatus.SUCCEEDED
    assert verdict(answered(200), job).record.status is RunStatus.DEAD


def test_errors_retry_unless_the_call_was_never_allowed_out() -> None:
    timeout = CallResult(0.0, 5.0, error="timeout", detail="no answer within 5 s")
    assert verdict(timeout).record.status is RunStatus.RETRY
    assert verdict(timeout).record.error == "timeout: no answer within 5 s"
    refused = CallResult(0.0, 0.0, error="egress_denied", detail="loopback")
    assert verdict(refused).record.status is RunStatus.DEAD


def test_a_delivered_kafka_message_succeeds() -> None:
    job = definition(KafkaTarget(topic="t.orders"))
    assert verdict(CallResult(0.0, 0.01, delivered=True), job).record.status is RunStatus.SUCCEEDED


def test_only_failures_of_a_reached_target_feed_its_breaker() -> None:
    job = definition()
    assert breaker_failure(answered(503), Outcome.RETRY, job) is True
    assert breaker_failure(answered(429), Outcome.RETRY, job) is False
    assert breaker_failure(answered(404), Outcome.PERMANENT, job) is False
    assert breaker_failure(CallResult(0, 0, error="egress_denied"), Outcome.PERMANENT, job) is None
    assert breaker_failure(CallResult(0, 0, error="connection_error"), Outcome.RETRY, job) is True
    assert breaker_failure(CallResult(0, 0, error="timeout"), Outcome.RETRY, job) is True


def test_failures_that_say_nothing_about_the_host_do_not_feed_its_breaker() -> None:
    assert breaker_failure(CallResult(0, 0, error="dns_failure"), Outcome.RETRY, definition()) is None
    tiny = definition(HttpTarget(url="https://example.com/x", timeout_s=0.000001))  # stored before the API refused it
    assert breaker_failure(CallResult(0, 0, error="timeout"), Outcome.RETRY, tiny) is None


def test_payloads_are_sent_in_their_declared_encoding() -> None:
    assert body_of(definition(payload="aGk=", payload_encoding="base64")) == b"hi"
    assert body_of(definition(payload="plain", payload_encoding="text")) == b"plain"


async def test_a_name_that_does_not_resolve_is_a_dns_failure_not_a_fault_of_a_reached_host() -> None:
    from tickwheel.egress import EgressPolicy
    from worker.targets import HttpCaller

    caller = HttpCaller(EgressPolicy(), 100)
    await caller.start()
    try:
        result = await caller.call(HttpTarget(url="https://no-such-host.invalid/x", timeout_s=5), b"", {})
    finally:
        await caller.close()
    assert result.error == "dns_failure"
    assert breaker_failure(result, Outcome.RETRY, definition()) is None


def test_a_non_positive_job_limit_stored_before_the_api_refused_it_leaves_the_default() -> None:
    from tickwheel.flow.limits import tightened

    assert tightened(100, None) == 100
    assert tightened(100, 5) == 5
    assert tightened(100, 500) == 100
    assert tightened(100, -1) == 100
    assert tightened(100.0, 0.0) == 100.0


def test_only_a_202_of_a_job_that_opted_in_is_answered_later() -> None:
    opted_in = definition(async_completion=AsyncCompletionDoc(lease_s=60, max_lease_s=600))
    assert answers_later(answered(202), opted_in)
    assert not answers_later(answered(200), opted_in) and not answers_later(answered(500), opted_in)
    assert not answers_later(answered(202), definition())
    assert verdict(answered(202)).record.status is RunStatus.SUCCEEDED  # any other job: a 2xx like the others


def test_a_reported_outcome_goes_through_the_retry_policy() -> None:
    policy = retry_policy_of(definition())  # 3 attempts, 1 s base delay, no jitter
    done = judge_report(CompletionReport("succeeded", "42 rows"), policy, 1, NOW, NOW, 0.0)
    assert done.record.status is RunStatus.SUCCEEDED
    assert (done.record.response_excerpt, done.record.error) == ("42 rows", None)
    failed = judge_report(CompletionReport("failed", "disk full"), policy, 1, NOW, NOW, 0.0)
    assert failed.record.status is RunStatus.RETRY and failed.record.retry_at == NOW + timedelta(seconds=1)
    assert failed.record.error == "reported failed: disk full"
    last = judge_report(CompletionReport("failed"), policy, 3, NOW, NOW, 0.0)
    assert last.record.status is RunStatus.DEAD and last.record.retry_at is None
    assert last.record.error is not None and last.record.error.startswith("reported failed; gave up after 3 attempts")
