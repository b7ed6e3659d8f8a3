"""The shared workload and measurement of the peer benchmarks: tickwheel, Celery and APScheduler side by side.

Every system gets the same plan: N once-runs due at instants spread evenly over a window that starts `lead_s`
after the start, each handed to the system `ahead_s` before it is due (a steady scheduling stream, not a
pre-loaded backlog). Each run, when it fires, makes the same HTTP POST to the same local sink
(`tickwheel.dev.sink.Sink`), carrying its run id in `webhook-id`; the path names the tenant. The sink's clock
stamps arrival; `tickwheel.dev.checker.check` turns arrivals into lost, duplicates and start lag.

A system implements `System`; `run_benchmark` drives it and returns a `BenchResult`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import requests

from tickwheel.dev.checker import Call, Expected, Report, check, delivers, lag_by_window, lag_summary
from tickwheel.dev.sink import Sink, SinkCall

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
WORK_DIR = REPO_ROOT / ".stack" / "bench"  # logs and pid files of the peer processes (gitignored)
SINK_PATH_PREFIX = "/bench/"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CALLS_PER_TURN = 1_000  # sink calls `wait_delivered` reads between two turns of the event loop
NO_FULL_COLLECTION = 1_000_000  # `steady_collector`'s threshold of the oldest generation: not within a run
LAG_WINDOW_S = 10.0  # the width of the start-lag windows a result keeps (`BenchResult.lag_windows`)


@dataclass(frozen=True, slots=True)
class Workload:
    """N runs due over `window_s` (0: all due at the same instant), the first `lead_s` after the start."""

    runs: int = 2_000
    window_s: float = 60.0
    lead_s: float = 10.0
    ahead_s: float = 5.0  # each run is handed to the system this long before it is due
    tenants: int = 2
    drain_s: float = 30.0  # how long after the last due instant the sink keeps listening

    def tenant_labels(self) -> list[str]:
        """The tenants the plan's runs belong to."""
        return [f"t{i}" for i in range(self.tenants)]

    def plan(self, start: datetime) -> list[Planned]:
        """The runs of this workload for a start instant, in due order."""
        step = self.window_s / self.runs if self.runs else 0.0
        first = start + timedelta(seconds=self.lead_s)
        plan = []
        labels = self.tenant_labels()
        for i in range(self.runs):
            due = _to_ms(first + timedelta(seconds=i * step))
            ahead = min(self.ahead_s, self.lead_s + i * step)
            plan.append(Planned(uuid.uuid4(), labels[i % self.tenants], due, due - timedelta(seconds=ahead)))
        return plan


def _to_ms(at: datetime) -> datetime:
    """Milliseconds are the precision of tickwheel's instants and run ids; every system gets the same instants."""
    return at.replace(microsecond=at.microsecond // 1000 * 1000)


@dataclass(frozen=True, slots=True)
class Planned:
    """One run of the plan. `run_id` is the harness's own id; a system that derives its own (tickwheel) maps it."""

    run_id: uuid.UUID
    tenant: str
    due_at: datetime
    submit_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": str(self.run_id),
            "tenant": self.tenant,
            "due_at": self.due_at.isoformat(),
            "submit_at": self.submit_at.isoformat(),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Planned:
        return cls(
            uuid.UUID(doc["run_id"]),
            doc["tenant"],
            datetime.fromisoformat(doc["due_at"]),
            datetime.fromisoformat(doc["submit_at"]),
        )


@dataclass(slots=True)
class Submitted:
    """What the system accepted: the runs it must call, how many submissions failed, and how fast it took them."""

    expected: list[Expected] = field(default_factory=list)
    errors: int = 0
    late: int = 0  # handed over after their due instant (the submitter fell behind)
    latencies_s: list[float] = field(default_factory=list)  # how long each hand-over took


class System(Protocol):
    name: str

    async def start(self, sink: Sink) -> None:
        """Start (or reach) the system's processes; runs must call `sink`."""

    async def prepare(self, tenants: Sequence[str]) -> None:
        """Make what runs of these tenants need before the plan's clock starts (tickwheel: the tenants)."""

    async def schedule(self, plan: list[Planned], sink: Sink) -> Submitted:
        """Hand every planned run to the system at its submit instant; return when all are handed over."""

    def pids(self) -> list[int]:
        """The system's own processes (their CPU time is measured, children included)."""

    def server_pids(self) -> list[int]:
        """The shared servers the system relies on (broker, database): measured apart, as others use them too."""

    async def stop(self) -> None:
        """Stop what `start` started and remove the system's state."""


@dataclass(frozen=True, slots=True)
class BenchResult:
    system: str
    date: str
    workload: dict[str, Any]
    submitted: int
    submit_errors: int
    submit_late: int
    submit_s: dict[str, float]
    delivered: int
    lost: int
    duplicate_calls: int
    early: int
    unexpected: int
    runs_per_s: float
    lag_s: dict[str, float]
    cpu_s: float
    cpu_ms_per_run: float
    server_cpu_s: float
    lag_windows: list[dict[str, float]] = field(default_factory=list)  # `lag_by_window`, LAG_WINDOW_S wide

    def line(self) -> str:
        lag = " ".join(f"{k}={v * 1000:.0f}ms" for k, v in self.lag_s.items())
        submit = " ".join(f"{k}={v * 1000:.1f}ms" for k, v in self.submit_s.items())
        return (
            f"{self.system}: submitted {self.submitted} ({submit}, errors {self.submit_errors}, "
            f"late {self.submit_late}), delivered {self.delivered}, lost {self.lost}, duplicates "
            f"{self.duplicate_calls}, early {self.early}, {self.runs_per_s:.1f} runs/s, lag {lag or 'n/a'}, "
            f"cpu {self.cpu_s:.1f}s ({self.cpu_ms_per_run:.2f} ms/run), servers' cpu {self.server_cpu_s:.1f}s"
        )


# --- the HTTP call every peer makes ------------------------------------------------------------------------

_sessions = threading.local()


def sink_url(sink: Sink, tenant: str) -> str:
    return sink.url(f"{SINK_PATH_PREFIX}{tenant}")


def call_sink(url: str, run_id: str, timeout_s: float = 30.0) -> int:
    """The call a peer's job makes: POST a small JSON body with the run id as `webhook-id` and idempotency key
    (what tickwheel's worker sends), raising on a non-2xx answer. One keep-alive session per thread."""
    session = getattr(_sessions, "session", None)
    if session is None:
        session = _sessions.session = requests.Session()
    body = json.dumps({"runId": run_id}).encode()
    headers = {"content-type": "application/json", "webhook-id": run_id, "idempotency-key": run_id}
    answer = session.post(url, data=body, headers=headers, timeout=timeout_s)
    answer.raise_for_status()
    return answer.status_code


def to_checker_calls(calls: Sequence[SinkCall]) -> list[Call]:
    """Sink calls under the bench path as checker calls: tenant from the path, run id from `webhook-id`.

    Signatures are not compared here (the peers sign nothing): a call counts as signed."""
    out = []
    for c in calls:
        if not c.path.startswith(SINK_PATH_PREFIX):
            continue
        run_id = _uuid_or_none(c.header("webhook-id"))
        received = datetime.fromtimestamp(c.received_at, UTC)
        out.append(Call(run_id, c.path.removeprefix(SINK_PATH_PREFIX), received, c.status or 0, True))
    return out


def _uuid_or_none(text: str | None) -> uuid.UUID | None:
    try:
        return uuid.UUID(text) if text else None
    except ValueError:
        return None


# --- pacing ------------------------------------------------------------------------------------------------


async def paced_submit(
    plan: list[Planned],
    submit_one: Callable[[Planned], Awaitable[Expected]],
    *,
    concurrency: int = 8,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Submitted:
    """Call `submit_one` for each run at its submit instant, at most `concurrency` at a time."""
    result = Submitted()
    gate = asyncio.Semaphore(concurrency)

    async def one(run: Planned) -> None:
        try:
            result.late += now() > run.due_at
            started = time.monotonic()
            result.expected.append(await submit_one(run))
            result.latencies_s.append(time.monotonic() - started)
        except Exception as exc:  # a refused submission is a figure of the benchmark, not a crash
            result.errors += 1
            log.warning("submission of %s failed: %r", run.run_id, exc)
        finally:
            gate.release()

    # Only the submissions still in flight are kept: a gather over every task of a long step (180,000 at 300/s for
    # ten minutes) held the event loop the sink answers on as the last runs came due (their start lag, ~2 s).
    in_flight: set[asyncio.Task[None]] = set()
    for run in plan:
        await _sleep_until(run.submit_at, now)
        await gate.acquire()
        task = asyncio.create_task(one(run))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
    if in_flight:
        await asyncio.gather(*in_flight)
    return result


async def _sleep_until(at: datetime, now: Callable[[], datetime]) -> None:
    delay = (at - now()).total_seconds()
    if delay > 0:
        await asyncio.sleep(delay)


# --- measurement ---------------------------------------------------------------------------------------------


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU of `pids` and all their descendants, now (reaped children included)."""
    stats = _all_stats()
    wanted = set(pids)
    grew = True
    while grew:
        more = {pid for pid, (ppid, _) in stats.items() if ppid in wanted and pid not in wanted}
        wanted |= more
        grew = bool(more)
    return sum(stats[p][1] for p in wanted if p in stats) / CLOCK_TICKS


def _all_stats() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, utime + stime + cutime + cstime in clock ticks)."""
    stats = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        stats[int(entry.name)] = (int(fields[1]), sum(int(f) for f in fields[11:15]))
    return stats


def spawn_peer(name: str, argv: list[str]) -> int:
    """Start a peer's process (log and pid file under .stack/bench/<name>/); it imports from this repository."""
    from tickwheel.dev.stack import process

    paths = [str(REPO_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return process.spawn(WORK_DIR, name, argv)


def stop_peer(name: str, pid: int | None) -> None:
    """Stop a peer's process group. `terminate` can see the process as a zombie before it reaps it; one more
    `is_running` reaps it, so no Popen is left to warn at exit."""
    from tickwheel.dev.stack import process

    process.terminate(WORK_DIR, name)
    if pid is not None:
        process.is_running(pid)


def stack_server_pids(*kinds: str) -> list[int]:
    """Pids of the local stack's servers of these kinds (`tickwheel stack up`; every node of each) that are
    running; a kind with none running is an error, not a server that cost nothing (run from the directory whose
    `.stack` holds the servers: started elsewhere, arq's Redis once counted 0.0 s)."""
    from tickwheel.dev import stack
    from tickwheel.dev.stack import process

    root = stack.stack_dir()
    pids = []
    for kind in kinds:
        running = [p for p in (process.read_pid(root, name) for name in process.server_names(root, kind)) if p]
        if not running:
            raise RuntimeError(f"no {kind} of the stack in {root} is running: its CPU would count as 0")
        pids += running
    return pids


async def wait_delivered(sink: Sink, expected: list[Expected], deadline: datetime) -> None:
    """Wait until every expected run is delivered as the checker counts it (`checker.delivers`: a 2xx call, or any
    call of a run not meant to succeed), or `deadline`. Each look reads only the calls that came since the last,
    CALLS_PER_TURN at a time: the sink answers on this event loop, so reading all of them at once (180,000 after
    ten minutes at 300/s; ~2 s) held its answers back and stamped the last runs' arrivals late."""
    missing = {e.run_id: e for e in expected}
    read = 0
    while datetime.now(UTC) < deadline:
        while read < len(sink.calls):  # the first look reads the whole step's calls: a slice at a time
            new = sink.calls[read : read + CALLS_PER_TURN]
            read += len(new)
            for call in to_checker_calls(new):
                run = missing.get(call.run_id) if call.run_id is not None else None
                if run is not None and delivers(run, call):
                    del missing[run.run_id]
            await asyncio.sleep(0)  # the sink answers between slices
        if not missing:
            return
        await asyncio.sleep(0.5)


@contextlib.contextmanager
def steady_collector() -> Iterator[None]:
    """No full collections of the harness's own heap while it measures: the sink's calls and the plan (hundreds of
    thousands of objects in a long run) made each one a pause of the event loop that answers the sink, charged to
    the system as start lag. What exists before is frozen, the young generations are collected as usual."""
    gc.collect()
    gc.freeze()
    thresholds = gc.get_threshold()
    gc.set_threshold(thresholds[0], thresholds[1], NO_FULL_COLLECTION)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def summarize(
    system: str, workload: Workload, submitted: Submitted, report: Report, calls: list[Call], cpu_s: tuple[float, float]
) -> BenchResult:
    first_due = min((e.due_at for e in submitted.expected), default=None)
    delivered_at = [c.received_at for c in calls if c.run_id is not None and 200 <= c.status < 300]
    span = (max(delivered_at) - first_due).total_seconds() if delivered_at and first_due else 0.0
    return BenchResult(
        system=system,
        date=datetime.now(UTC).isoformat(timespec="seconds"),
        workload=asdict(workload),
        submitted=len(submitted.expected),
        submit_errors=submitted.errors,
        submit_late=submitted.late,
        submit_s=lag_summary(submitted.latencies_s),
        delivered=report.delivered,
        lost=len(report.lost),
        duplicate_calls=sum(report.duplicates.values()),
        early=len(report.early),
        unexpected=report.unexpected,
        runs_per_s=report.delivered / span if span > 0 else 0.0,
        lag_s=report.lag_s,
        cpu_s=cpu_s[0],
        cpu_ms_per_run=1000 * cpu_s[0] / report.delivered if report.delivered else 0.0,
        server_cpu_s=cpu_s[1],
        lag_windows=lag_by_window(submitted.expected, calls, LAG_WINDOW_S),
    )


async def run_benchmark(system: System, workload: Workload) -> BenchResult:
    """Start the sink and the system, play the workload, wait for the calls, check them, stop."""
    async with Sink() as sink:
        await system.start(sink)
        try:
            await system.prepare(workload.tenant_labels())
            with steady_collector():
                cpu_before = cpu_seconds(system.pids()), cpu_seconds(system.server_pids())
                plan = workload.plan(datetime.now(UTC))
                submitted = await system.schedule(plan, sink)
                last_due = max((e.due_at for e in submitted.expected), default=datetime.now(UTC))
                await wait_delivered(sink, submitted.expected, last_due + timedelta(seconds=workload.drain_s))
                cpu_s = cpu_seconds(system.pids()) - cpu_before[0], cpu_seconds(system.server_pids()) - cpu_before[1]
        finally:
            await system.stop()
        calls = to_checker_calls(sink.calls)
    report = check(submitted.expected, calls, now=datetime.now(UTC))
    log.info("%s: %s", system.name, report.summary())
    return summarize(system.name, workload, submitted, report, calls, cpu_s)


# --- command line ------------------------------------------------------------------------------------------


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    d = Workload()
    p.add_argument("--runs", type=int, default=d.runs, help="runs in the workload (default %(default)s)")
    p.add_argument("--window", type=float, default=d.window_s, help="seconds the due instants spread over")
    p.add_argument("--lead", type=float, default=d.lead_s, help="seconds from start to the first due instant")
    p.add_argument("--ahead", type=float, default=d.ahead_s, help="seconds before its due instant a run is handed over")
    p.add_argument("--tenants", type=int, default=d.tenants)
    p.add_argument("--drain", type=float, default=d.drain_s, help="seconds to wait for calls after the last due")
    p.add_argument("--json", type=Path, default=None, help="write the result here (default benchmarks/results/)")
    return p


def workload_of(args: argparse.Namespace) -> Workload:
    return Workload(
        runs=args.runs,
        window_s=args.window,
        lead_s=args.lead,
        ahead_s=args.ahead,
        tenants=args.tenants,
        drain_s=args.drain,
    )


def write_results(results: list[BenchResult], path: Path | None) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    target = path or RESULTS_DIR / f"peers-{'-'.join(r.system for r in results)}-{stamp}.json"
    target.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    return target


def main(
    make_system: Callable[[argparse.Namespace], System],
    description: str,
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
) -> int:
    """The command line of one system's benchmark."""
    p = parser(description)
    if extra:
        extra(p)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    result = asyncio.run(run_benchmark(make_system(args), workload_of(args)))
    print(result.line())
    print(f"results: {write_results([result], args.json)}")
    return 0 if result.lost == 0 else 1
