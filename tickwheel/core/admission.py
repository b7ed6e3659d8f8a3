"""Pure admission decisions of one API process (issue 19): take a request now, let it wait for a slot, or shed it
(503 + Retry-After) before any work is done for it.

An overloaded process that takes every request answers all of them late: run 10 of the nemesis soak queued
creates until they ran into the client's 15 s timeout, and the retries queued behind them. Three bounds instead:

- **Slots.** At most `max_in_flight` requests are worked on at once. One more waits for a slot (first come, first
  served) in a queue of at most `max_waiting`; past that it is shed at once.
- **How long a request may wait** is CoDel's rule as servers use it (Nichols and Jacobson, RFC 8289; Facebook's
  "Fail at scale"): a burst is absorbed (`wait_max_s`), but once the waits have stayed at or above
  `wait_target_s` for `interval_s` the queue is standing, not a burst, and a request waits only `wait_target_s`
  before it is shed. One request that finds a slot free at once ends it.
- **Event-loop lag** (how late the loop runs a timer; every step of every request waits that long): at or above
  `lag_target_s` for `interval_s`, every new request is shed until one sample is below the target. It sees what
  the slots cannot: a process starved of CPU by its neighbours (run 10's box at load 48-68).

Times are monotonic seconds given by the caller; nothing here reads a clock.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass


class Verdict(enum.Enum):
    """What to do with a request that has just arrived."""

    ADMIT = "admit"
    """A slot is free and nobody waits for one: work on it now."""
    WAIT = "wait"
    """Every slot is taken: wait for one, at most `wait_limit_s`."""
    SHED = "shed"
    """Answer 503 + Retry-After now, before any work."""


class ShedReason(enum.Enum):
    """Why a request was shed (the label of `tickwheel_api_shed_total`)."""

    QUEUE_FULL = "queue_full"
    """`max_waiting` requests were already waiting for a slot."""
    WAITED = "waited"
    """No slot came free within the request's wait limit."""
    LOOP_LAG = "loop_lag"
    """The event loop has lagged at or above `lag_target_s` for `interval_s`."""


@dataclass(frozen=True, slots=True)
class AdmissionPolicy:
    """The bounds of one API process (`api.*` settings; `max_in_flight` 0: no admission control)."""

    max_in_flight: int = 128
    max_waiting: int = 256
    wait_max_s: float = 0.5
    wait_target_s: float = 0.05
    interval_s: float = 1.0
    lag_target_s: float = 0.5  # 0: the loop's lag sheds nothing
    retry_after_s: float = 1.0


@dataclass(frozen=True, slots=True)
class Delay:
    """CoDel's memory of one delay signal: since when every sample has been at or above its target."""

    above_since_s: float | None = None
    """When the current run of samples at or above the target began; None: the last sample was below it."""


def observe(delay: Delay, sample_s: float, target_s: float, now_s: float) -> Delay:
    """`delay` after one more sample taken at `now_s`."""
    if sample_s < target_s:
        return Delay()
    return delay if delay.above_since_s is not None else Delay(now_s)


def standing(delay: Delay, interval_s: float, now_s: float) -> bool:
    """Whether the signal has stayed at or above its target for a whole interval (overload, not a burst)."""
    return delay.above_since_s is not None and now_s - delay.above_since_s >= interval_s


@dataclass(frozen=True, slots=True)
class Load:
    """What one process is doing when a request arrives."""

    in_flight: int
    waiting: int
    queue: Delay
    lag: Delay


def decide(policy: AdmissionPolicy, load: Load, now_s: float) -> tuple[Verdict, ShedReason | None]:
    """Admit, wait or shed a request arriving at `now_s` (the reason with SHED)."""
    if policy.lag_target_s > 0 and standing(load.lag, policy.interval_s, now_s):
        return Verdict.SHED, ShedReason.LOOP_LAG
    if load.in_flight < policy.max_in_flight and load.waiting == 0:
        return Verdict.ADMIT, None
    if load.waiting >= policy.max_waiting:
        return Verdict.SHED, ShedReason.QUEUE_FULL
    return Verdict.WAIT, None


def wait_limit_s(policy: AdmissionPolicy, queue: Delay, now_s: float) -> float:
    """How long a request that must wait may wait for a slot: short while the queue is standing."""
    if standing(queue, policy.interval_s, now_s):
        return min(policy.wait_target_s, policy.wait_max_s)
    return policy.wait_max_s


def retry_after_s(policy: AdmissionPolicy, fraction: float) -> int:
    """Retry-After of a shed request in whole seconds (the header has no fractions): the policy's, rounded up,
    or one second more for half the callers (`fraction` in [0, 1) at random), so they do not all come back in the
    same second."""
    return max(1, math.ceil(policy.retry_after_s)) + (1 if fraction >= 0.5 else 0)
