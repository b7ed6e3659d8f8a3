"""Retry policy: classify an outcome, compute the backoff, decide retry-or-dead. Pure: time and randomness
are arguments.

Attempts are numbered from 1 (the run row's `attempt` after the claim); the retry after attempt n waits
min(max_delay_s, base_delay_s * 2**(n - 1)) less up to `jitter` of it: base, 2 base, 4 base, ...
"""

from __future__ import annotations

import email.utils
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

# A policy without max_age_s still may not be deferred (breaker, caps) for longer than this.
MAX_DEFERRAL_AGE_S = 7 * 86_400
PERMANENT_ERRORS = frozenset({"egress_denied", "invalid_target", "payload_too_large", "tls_certificate"})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Per-job retry settings; `max_age_s` bounds the time from the scheduled instant to the last retry."""

    max_attempts: int = 5
    base_delay_s: float = 1.0
    max_delay_s: float = 300.0
    max_age_s: float | None = 86400
    jitter: float = 0.2


class Outcome(StrEnum):
    """How one attempt ended, for the retry decision."""

    SUCCESS = "success"
    RETRY = "retry"  # transient: 408, 429, 5xx, timeouts, connection errors
    PERMANENT = "permanent"  # other 4xx and errors no retry can fix


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """What to do after an attempt: done (`succeeded`), retry at `retry_at`, or dead with `dead_reason`."""

    succeeded: bool = False
    retry_at: datetime | None = None
    dead_reason: str | None = None

    @property
    def dead(self) -> bool:
        """True when the run goes to the dead-letter table."""
        return self.dead_reason is not None


def classify(status: int | None, *, error: str | None = None, success_codes: frozenset[int] | None = None) -> Outcome:
    """2xx (or `success_codes`) succeed; 408, 429, 5xx and no status (timeout, connection error) retry; other
    statuses, and errors in PERMANENT_ERRORS (a call that was never allowed out), are permanent."""
    if error in PERMANENT_ERRORS:
        return Outcome.PERMANENT
    if status is None:
        return Outcome.RETRY
    if status in success_codes if success_codes is not None else 200 <= status < 300:
        return Outcome.SUCCESS
    if status in (408, 429) or status >= 500:
        return Outcome.RETRY
    return Outcome.PERMANENT


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait from a `Retry-After` header (delta-seconds or HTTP-date); None when absent or invalid."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - now).total_seconds())


MAX_RETRY_AFTER_S = 86_400.0
"""A Retry-After is honoured up to a day (the cap of max_delay_s): a retry row is written to its minute bucket,
whose 14-day TTL must outlive it; a server asking for longer is asked again a day later."""


def next_delay_s(policy: RetryPolicy, attempt: int, *, rand: float, retry_after_s: float | None = None) -> float:
    """Backoff after failed attempt `attempt` (1-based) with jitter from `rand` in [0, 1); never less than the
    server's Retry-After (up to MAX_RETRY_AFTER_S)."""
    exponent = min(max(attempt - 1, 0), 62)
    delay = min(policy.max_delay_s, policy.base_delay_s * 2.0**exponent)
    delay *= 1.0 - policy.jitter * min(max(rand, 0.0), 1.0)
    if retry_after_s is not None:
        delay = max(delay, min(retry_after_s, MAX_RETRY_AFTER_S))
    return delay


def decide(
    policy: RetryPolicy,
    outcome: Outcome,
    attempt: int,
    first_scheduled_at: datetime,
    now: datetime,
    rand: float,
    retry_after_s: float | None = None,
) -> RetryDecision:
    """After attempt `attempt` (1-based) ended with `outcome`: succeed, retry at an instant, or go dead (why)."""
    if outcome is Outcome.SUCCESS:
        return RetryDecision(succeeded=True)
    if outcome is Outcome.PERMANENT:
        return RetryDecision(dead_reason="permanent failure")
    if attempt >= policy.max_attempts:
        return RetryDecision(dead_reason=f"gave up after {attempt} attempts (max_attempts {policy.max_attempts})")
    retry_at = now + timedelta(seconds=next_delay_s(policy, attempt, rand=rand, retry_after_s=retry_after_s))
    if policy.max_age_s is not None and (retry_at - first_scheduled_at).total_seconds() > policy.max_age_s:
        return RetryDecision(dead_reason=f"the retry would start more than max_age_s {policy.max_age_s:g} s late")
    return RetryDecision(retry_at=retry_at)


def deferral_dead_reason(policy: RetryPolicy, first_scheduled_at: datetime, deferred_until: datetime) -> str | None:
    """Why a run deferred until `deferred_until` (flow control, no attempt spent) must go dead instead: it would
    start later than its policy's max_age_s (MAX_DEFERRAL_AGE_S without one) after it was due; None otherwise."""
    limit_s = policy.max_age_s if policy.max_age_s is not None else MAX_DEFERRAL_AGE_S
    if (deferred_until - first_scheduled_at).total_seconds() > limit_s:
        return f"deferred more than max_age_s {limit_s:g} s past its scheduled time"
    return None
