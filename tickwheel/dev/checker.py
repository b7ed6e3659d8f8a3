"""The end-to-end checker: what a sink received, compared with what the API accepted.

Pure analysis, used by tests/e2e, the Locust end-to-end mode and the benchmarks. A run counts as delivered
when the sink answered 2xx to a call carrying its run id; lag is (call received - scheduled time).
"""

from __future__ import annotations

import statistics
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Expected:
    """A run the API answered 201 for (or a chained occurrence of it) that must be called once."""

    run_id: uuid.UUID
    tenant: str
    due_at: datetime


@dataclass(frozen=True, slots=True)
class Call:
    """One call the sink received."""

    run_id: uuid.UUID | None
    tenant: str
    received_at: datetime
    status: int
    signature_valid: bool


@dataclass(frozen=True, slots=True)
class Report:
    expected: int
    delivered: int
    lost: list[uuid.UUID]
    duplicates: dict[uuid.UUID, int]
    early: list[uuid.UUID]
    invalid_signatures: int
    cross_tenant: int
    unexpected: int
    lag_s: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """No loss, no early fire, no cross-tenant delivery, no bad signature."""
        return not (self.lost or self.early or self.cross_tenant or self.invalid_signatures)

    def summary(self) -> str:
        lag = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in self.lag_s.items())
        return (
            f"expected {self.expected}, delivered {self.delivered}, lost {len(self.lost)}, "
            f"duplicate calls {sum(self.duplicates.values())} (runs {len(self.duplicates)}), "
            f"early {len(self.early)}, invalid signatures {self.invalid_signatures}, "
            f"cross-tenant {self.cross_tenant}, unexpected {self.unexpected}; start lag {lag or 'n/a'}"
        )


def check(expected: Iterable[Expected], calls: Iterable[Call], *, now: datetime, early_slack_s: float = 0.0) -> Report:
    """Compare accepted runs due before `now` with the calls received."""
    due = {e.run_id: e for e in expected if e.due_at <= now}
    by_run: dict[uuid.UUID, list[Call]] = defaultdict(list)
    invalid = cross = unexpected = 0
    for call in calls:
        invalid += not call.signature_valid
        run = due.get(call.run_id) if call.run_id else None
        if run is None:
            unexpected += 1
            continue
        if run.tenant != call.tenant:
            cross += 1
            continue
        by_run[call.run_id].append(call)  # type: ignore[index]
    delivered = {rid: cs for rid, cs in by_run.items() if any(200 <= c.status < 300 for c in cs)}
    successes = Counter({rid: sum(200 <= c.status < 300 for c in cs) for rid, cs in by_run.items()})
    early = [
        rid for rid, cs in by_run.items() if min(c.received_at for c in cs) < _shift(due[rid].due_at, -early_slack_s)
    ]
    lags = sorted(
        (min(c.received_at for c in cs) - due[rid].due_at).total_seconds() for rid, cs in delivered.items()
    )
    return Report(
        expected=len(due),
        delivered=len(delivered),
        lost=[rid for rid in due if rid not in delivered],
        duplicates={rid: n - 1 for rid, n in successes.items() if n > 1},
        early=early,
        invalid_signatures=invalid,
        cross_tenant=cross,
        unexpected=unexpected,
        lag_s=lag_summary(lags),
    )


def lag_summary(lags: list[float]) -> dict[str, float]:
    """p50, p99 and max of a list of lags in seconds (empty when there are none)."""
    if not lags:
        return {}
    ordered = sorted(lags)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {"p50": statistics.median(ordered), "p99": p99, "max": ordered[-1]}


def _shift(at: datetime, seconds: float) -> datetime:
    from datetime import timedelta

    return at + timedelta(seconds=seconds)
