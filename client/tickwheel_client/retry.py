"""When to try a request again, and after how long: a pure decision both clients share.

Retried: 429 and 503 (honouring Retry-After), a 409 that carries Retry-After (the same Idempotency-Key is
still being answered), and a connection that failed or timed out. A mutation is retried with the same
Idempotency-Key, so the API applies it at most once and replays its first answer.
"""

from __future__ import annotations

import dataclasses
import email.utils
import random
from collections.abc import Callable
from datetime import UTC, datetime

RETRIED_STATUSES = frozenset({429, 503})


@dataclasses.dataclass(frozen=True, slots=True)
class Retries:
    """How many tries in all, and the exponential backoff between them when the API gives no Retry-After."""

    max_attempts: int = 5
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    jitter: Callable[[], float] = random.random  # a fraction in [0, 1) of the delay added, so clients spread

    def backoff_s(self, attempt: int) -> float:
        """The pause after failed try number `attempt` (1-based) when the API did not say."""
        delay = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        return float(delay * (1 + self.jitter()))


DEFAULT_RETRIES = Retries()
NO_RETRIES = Retries(max_attempts=1)


def retry_after_s(value: str | None, now: datetime | None = None) -> float | None:
    """Retry-After as seconds: a number, or an HTTP date (RFC 9110); None when absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def wants_retry(status: int, retry_after: float | None) -> bool:
    """Whether an answer with this status (and Retry-After) is worth another try."""
    return status in RETRIED_STATUSES or (status == 409 and retry_after is not None)


def pause_s(retries: Retries, attempt: int, retry_after: float | None) -> float | None:
    """Seconds to wait before try `attempt + 1`, or None when `attempt` was the last one allowed."""
    if attempt >= retries.max_attempts:
        return None
    if retry_after is not None:
        return min(retry_after, retries.max_delay_s)
    return retries.backoff_s(attempt)
