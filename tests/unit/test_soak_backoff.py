"""The soak's load generator backs off between tries: Retry-After when the API gives one, else jittered and growing."""

from __future__ import annotations

import random

from benchmarks.soak import RETRY_BASE_S, RETRY_CAP_S, retry_pause_s


def test_retry_after_is_honoured_with_a_little_spread() -> None:
    jitter = random.Random(1)
    pauses = [retry_pause_s(1, "3", jitter) for _ in range(200)]
    assert all(3.0 <= pause <= 3.6 for pause in pauses)
    assert max(pauses) - min(pauses) > 0.3


def test_a_long_retry_after_is_capped() -> None:
    assert retry_pause_s(1, "600", random.Random(1)) <= RETRY_CAP_S * 1.2


def test_without_retry_after_the_ceiling_doubles_up_to_the_cap() -> None:
    jitter = random.Random(2)
    for attempt in range(1, 10):
        ceiling = min(RETRY_CAP_S, RETRY_BASE_S * 2**attempt)
        pauses = [retry_pause_s(attempt, None, jitter) for _ in range(300)]
        assert all(0.0 <= pause <= ceiling for pause in pauses)
        assert max(pauses) > 0.8 * ceiling


def test_an_http_date_retry_after_falls_back_to_the_back_off() -> None:
    pause = retry_pause_s(2, "Wed, 21 Oct 2026 07:28:00 GMT", random.Random(3))
    assert 0.0 <= pause <= RETRY_BASE_S * 4
