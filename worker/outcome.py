"""From a call's result to the run's next state: pure (time and randomness are arguments)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime

from schemas.messages import CompletionReport, HttpTarget, JobDefinition
from tickwheel.core.retry import Outcome, RetryDecision, RetryPolicy, classify, decide, parse_retry_after
from tickwheel.store.runs import AttemptResult, RunStatus
from worker.targets import CallResult

MIN_BREAKER_TIMEOUT_S = 1.0
CONTENT_TYPES = {"json": "application/json", "base64": "application/octet-stream", "text": "text/plain; charset=utf-8"}


@dataclass(frozen=True, slots=True)
class Verdict:
    """The classified outcome, the retry decision and what to record for the attempt."""

    outcome: Outcome
    decision: RetryDecision
    record: AttemptResult


def body_of(definition: JobDefinition) -> bytes:
    """The bytes a job sends: its payload decoded by its declared encoding."""
    if definition.payload_encoding == "base64":
        return base64.b64decode(definition.payload)
    return definition.payload.encode()


def outcome_of(result: CallResult, definition: JobDefinition) -> Outcome:
    if result.delivered:
        return Outcome.SUCCESS
    target = definition.target
    codes = frozenset(target.success_codes) if isinstance(target, HttpTarget) and target.success_codes else None
    return classify(result.status, error=result.error, success_codes=codes)


def judge(
    result: CallResult,
    definition: JobDefinition,
    policy: RetryPolicy,
    attempt: int,
    scheduled_at: datetime,
    now: datetime,
    rand: float,
) -> Verdict:
    """Classify the call, decide retry or dead (honouring Retry-After), and say what the attempt recorded."""
    outcome = outcome_of(result, definition)
    retry_after_s = parse_retry_after(result.retry_after, now)
    decision = decide(policy, outcome, attempt, scheduled_at, now, rand, retry_after_s)
    record = AttemptResult(
        status=status_of(decision),
        response_code=result.status,
        error=error_text(result, decision),
        response_excerpt=result.excerpt.decode("utf-8", errors="replace") if result.excerpt else None,
        retry_at=decision.retry_at,
    )
    return Verdict(outcome, decision, record)


def answers_later(result: CallResult, definition: JobDefinition) -> bool:
    """Whether the call asked to finish later: a 202 from the target of a job that opted in to asynchronous
    completion (any other job's 202 is a success like any 2xx)."""
    return definition.async_completion is not None and result.status == 202


def judge_report(
    report: CompletionReport,
    policy: RetryPolicy,
    attempt: int,
    scheduled_at: datetime,
    now: datetime,
    rand: float,
) -> Verdict:
    """The verdict on an asynchronous run's reported outcome: `failed` goes through the retry policy like a failed
    call (retry or dead), `succeeded` succeeds; the report's detail is the attempt's error or excerpt."""
    outcome = Outcome.SUCCESS if report.outcome == "succeeded" else Outcome.RETRY
    decision = decide(policy, outcome, attempt, scheduled_at, now, rand)
    if decision.succeeded:
        return Verdict(outcome, decision, AttemptResult(RunStatus.SUCCEEDED, response_excerpt=report.detail))
    what = f"reported failed: {report.detail}" if report.detail else "reported failed"
    error = f"{what}; {decision.dead_reason}" if decision.dead_reason else what
    return Verdict(outcome, decision, AttemptResult(status_of(decision), error=error, retry_at=decision.retry_at))


def status_of(decision: RetryDecision) -> RunStatus:
    """The run status a retry decision records."""
    if decision.succeeded:
        return RunStatus.SUCCEEDED
    return RunStatus.DEAD if decision.dead else RunStatus.RETRY


def error_text(result: CallResult, decision: RetryDecision) -> str | None:
    """What went wrong, in words (None on success)."""
    if decision.succeeded:
        return None
    what = f"{result.error}: {result.detail}" if result.error else f"HTTP {result.status}"
    return f"{what}; {decision.dead_reason}" if decision.dead_reason else what


# Errors that say nothing about the target host's health: the call never reached it (refused by policy, a name
# that did not resolve).
NOT_THE_HOSTS_FAULT = frozenset({"egress_denied", "invalid_target", "dns_failure"})


def breaker_failure(result: CallResult, outcome: Outcome, definition: JobDefinition) -> bool | None:
    """Whether the call counts as a failure of the target host for the breaker: only when the host answered
    (5xx), refused or dropped the connection, or timed out on a timeout of at least MIN_BREAKER_TIMEOUT_S.
    None when the call says nothing about the host: never reached, or a self-inflicted sub-second timeout
    (a job stored before the API refused them)."""
    if result.error in NOT_THE_HOSTS_FAULT:
        return None
    target = definition.target
    if result.error == "timeout" and isinstance(target, HttpTarget) and target.timeout_s < MIN_BREAKER_TIMEOUT_S:
        return None
    return outcome is Outcome.RETRY and result.status != 429
