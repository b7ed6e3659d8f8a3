"""The end-to-end checker: what a sink received, compared with what the API accepted.

Pure analysis, used by tests/e2e, the Locust end-to-end mode and the benchmarks. A run counts as delivered
when the sink answered 2xx to a call carrying its run id (a run expected to fail: when it was called at all);
lag is (first call received - scheduled time).

`check_windows` is the nemesis soak's view (benchmarks/soak.py): the same analysis per fault window (a run
belongs to the window its due time falls in, an API error to the window it happened in), for the steady time
outside every window, and overall; plus the runs whose final status is not the one expected and the API
requests the load generator saw fail.
"""

from __future__ import annotations

import statistics
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta


@dataclass(frozen=True, slots=True)
class Expected:
    """A run the API answered 201 for (or a chained occurrence of it) that must be called once.

    `succeeds` False: its target always fails, so it must be called, retried, and end DEAD (in the DLQ).
    """

    run_id: uuid.UUID
    tenant: str
    due_at: datetime
    succeeds: bool = True

    @property
    def final_status(self) -> str:
        """The status the run must end in."""
        return "SUCCEEDED" if self.succeeds else "DEAD"


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
    sorted_calls = _calls_by_run(due, calls)
    by_run = sorted_calls.by_run
    delivered = _delivered(due, by_run)
    successes = Counter({rid: sum(200 <= c.status < 300 for c in cs) for rid, cs in by_run.items()})
    early = [rid for rid, cs in by_run.items() if _first_call_at(cs) < _shift(due[rid].due_at, -early_slack_s)]
    return Report(
        expected=len(due),
        delivered=len(delivered),
        lost=[rid for rid in due if rid not in delivered],
        duplicates={rid: n - 1 for rid, n in successes.items() if n > 1},
        early=early,
        invalid_signatures=sorted_calls.invalid_signatures,
        cross_tenant=sorted_calls.cross_tenant,
        unexpected=sorted_calls.unexpected,
        lag_s=lag_summary(sorted(_start_lag_s(due[rid], cs) for rid, cs in delivered.items())),
    )


@dataclass(frozen=True, slots=True)
class _SortedCalls:
    """The calls to each expected run (from its own tenant), and the count of each kind of call set aside."""

    by_run: dict[uuid.UUID, list[Call]]
    invalid_signatures: int
    cross_tenant: int
    unexpected: int


def _calls_by_run(due: Mapping[uuid.UUID, Expected], calls: Iterable[Call]) -> _SortedCalls:
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
    return _SortedCalls(by_run, invalid, cross, unexpected)


def delivers(run: Expected, call: Call) -> bool:
    """Whether `call` delivers `run`: a call for its own tenant that answered 2xx, or any such call when the run is
    not meant to succeed."""
    return call.tenant == run.tenant and (not run.succeeds or 200 <= call.status < 300)


def _delivered(
    due: Mapping[uuid.UUID, Expected], by_run: Mapping[uuid.UUID, list[Call]]
) -> dict[uuid.UUID, list[Call]]:
    """The runs delivered (`delivers`)."""
    return {rid: cs for rid, cs in by_run.items() if any(delivers(due[rid], c) for c in cs)}


def _first_call_at(calls: list[Call]) -> datetime:
    """When a run was first called, whatever that call answered: where its start lag ends, and what is early."""
    return min(c.received_at for c in calls)


def _start_lag_s(run: Expected, calls: list[Call]) -> float:
    """A delivered run's start lag: from its due time to its first call (the scheduler started it then; a target's
    failure is not the scheduler's lateness)."""
    return (_first_call_at(calls) - run.due_at).total_seconds()


def lag_summary(lags: list[float]) -> dict[str, float]:
    """p50, p99 and max of a list of lags in seconds (empty when there are none)."""
    if not lags:
        return {}
    ordered = sorted(lags)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {"p50": statistics.median(ordered), "p99": p99, "max": ordered[-1]}


def lag_by_window(expected: Iterable[Expected], calls: Iterable[Call], width_s: float) -> list[dict[str, float]]:
    """Start lag per `width_s` window of due time, in order: where in a long run its tail came from (a p99 made of
    a few bad windows is a pause; spread over all of them, a rate the box does not hold). Each window gives its
    offset from the first due instant, its delivered runs and their lag's p50, p99 and max: the lag `check`
    summarises, of the same runs."""
    due = {e.run_id: e for e in expected}
    delivered = _delivered(due, _calls_by_run(due, calls).by_run)
    if not delivered:
        return []
    start = min(due[rid].due_at for rid in delivered)
    windows: dict[int, list[float]] = defaultdict(list)
    for rid, cs in delivered.items():
        offset = int((due[rid].due_at - start).total_seconds() // width_s)
        windows[offset].append(_start_lag_s(due[rid], cs))
    return [{"offset_s": i * width_s, "runs": len(lags), **lag_summary(lags)} for i, lags in sorted(windows.items())]


def _shift(at: datetime, seconds: float) -> datetime:
    return at + timedelta(seconds=seconds)


@dataclass(frozen=True, slots=True)
class Window:
    """A stretch of the soak: one fault from its injection until the platform had time to recover."""

    name: str
    start: datetime
    end: datetime
    fault: str = ""  # the fault's kind ("kill-worker"), shared by its repeats; the name says which node

    def holds(self, at: datetime) -> bool:
        return self.start <= at < self.end


@dataclass(frozen=True, slots=True)
class ApiRequest:
    """One request of the load generator: when it was sent and whether it failed (an error answer, or none)."""

    at: datetime
    failed: bool
    detail: str = ""


@dataclass(frozen=True, slots=True)
class WindowReport:
    """One row of the soak's table."""

    window: str
    report: Report
    not_final: list[uuid.UUID]
    api_requests: int
    api_errors: int

    def row(self) -> str:
        """A Markdown table row (see TABLE_HEADER)."""
        r = self.report
        lag = [f"{r.lag_s[k]:.2f}" if k in r.lag_s else "-" for k in ("p50", "p99", "max")]
        return (
            f"| {self.window} | {r.expected} | {len(r.lost)} | {sum(r.duplicates.values())} | {len(r.early)} | "
            f"{' | '.join(lag)} | {len(self.not_final)} | {self.api_errors}/{self.api_requests} |"
        )


TABLE_HEADER = (
    "| window | runs due | lost | duplicate calls | early | lag p50 s | lag p99 s | lag max s | not final "
    "| API errors/requests |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def _window_groups(windows: Sequence[Window], by_fault: bool) -> list[tuple[str, list[Window]]]:
    if not by_fault:
        return [(w.name, [w]) for w in windows]
    kinds: dict[str, list[Window]] = {}
    for window in windows:
        kinds.setdefault(window.fault or window.name, []).append(window)
    return [(f"{kind} x{len(spans)}", spans) for kind, spans in kinds.items()]


def check_windows(
    expected: Sequence[Expected],
    calls: Sequence[Call],
    windows: Sequence[Window],
    *,
    now: datetime,
    finals: Mapping[uuid.UUID, str],
    requests: Sequence[ApiRequest],
    early_slack_s: float = 0.0,
    by_fault: bool = False,
) -> list[WindowReport]:
    """One report per window (per fault kind with `by_fault`, its repeats together), then "steady" (outside every
    window), then "overall".

    A call is matched to its run wherever it falls in time, so a run due in a window and called after it counts
    in that window (its lag shows the fault). `finals` is each run's status at the end; a run missing from it or
    in another status than `Expected.final_status` is "not final".
    """
    due = [e for e in expected if e.due_at <= now]
    groups: list[tuple[str, list[Expected], list[ApiRequest]]] = []
    for name, spans in _window_groups(windows, by_fault):
        groups.append(
            (
                name,
                [e for e in due if any(w.holds(e.due_at) for w in spans)],
                [r for r in requests if any(w.holds(r.at) for w in spans)],
            )
        )
    steady = [e for e in due if not any(w.holds(e.due_at) for w in windows)]
    quiet = [r for r in requests if not any(w.holds(r.at) for w in windows)]
    groups += [("steady", steady, quiet), ("overall", list(due), list(requests))]
    reports = []
    for name, runs, asked in groups:
        ids = {e.run_id for e in runs}
        report = check(runs, [c for c in calls if c.run_id in ids], now=now, early_slack_s=early_slack_s)
        not_final = [e.run_id for e in runs if finals.get(e.run_id) != e.final_status]
        reports.append(WindowReport(name, report, not_final, len(asked), sum(r.failed for r in asked)))
    return reports
