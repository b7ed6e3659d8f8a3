"""Peak: N bulk runs due at the same instant with a 10-minute delay tolerance, beside a trickle of urgent runs.

Everything goes through the public API to the local sink and is checked by `tickwheel.dev.checker`, reusing the
peers' harness (`paced_submit`, `wait_delivered`, `to_checker_calls`) and tickwheel's side of it
(`TickwheelSystem`: tenants, the API session). Setup (creating the N bulk jobs as fast as the API takes them)
is timed on its own; the bulk instant is set far enough ahead that every create lands before it. Then:
time to drain (last bulk call - the due instant), bulk calls/s, bulk runs later than their tolerance, urgent
start lag, lost and duplicate calls, and the same counters as `benchmarks/sustained.py` (CPU per process,
Cassandra operations, Kafka messages).

    .venv/bin/python -m benchmarks.peak --runs 30000 --create-rate 250 --urgent-rate 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
import uuid
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any

from benchmarks.peers import harness
from benchmarks.peers.harness import Planned, Submitted
from benchmarks.peers.tickwheel_bench import SubmissionRefused, TickwheelSystem, once_job
from benchmarks.sustained import Probe, per_run
from tickwheel.dev.checker import Call, Expected, Report, check, lag_summary
from tickwheel.dev.platform import local_settings
from tickwheel.dev.sink import Sink

log = logging.getLogger(__name__)

TOLERANCE_S = 600
BULK_TENANTS = 4  # the API's per-tenant request rate (200/s) would otherwise cap the setup
URGENT = "urgent"


class PeakSystem(TickwheelSystem):
    """Bulk tenants' jobs carry the 10-minute tolerance and the bulk lane; the urgent tenant's the urgent lane."""

    async def _submit(self, run: Planned, sink: Sink) -> Expected:
        assert self._http is not None, "start() first"
        headers = {"Authorization": f"Bearer {self.keys[run.tenant]}", "Idempotency-Key": str(run.run_id)}
        body = once_job(run.due_at, harness.sink_url(sink, run.tenant), f"peak-{run.run_id}")
        if run.tenant == URGENT:
            body["priority"] = "urgent"
        else:
            body.update(priority="bulk", delayToleranceS=TOLERANCE_S)
        async with self._http.post("/v1/jobs", json=body, headers=headers) as answer:
            document = await answer.json(content_type=None)
            if answer.status != 201:
                raise SubmissionRefused(f"{answer.status}: {document}")
        return Expected(uuid.UUID(document["next_run_id"]), run.tenant, run.due_at)


def plans(args: argparse.Namespace, start: datetime) -> tuple[datetime, list[Planned], list[Planned]]:
    """The bulk instant, the bulk runs (all handed over at once) and the urgent trickle (each 5 s ahead), which
    starts 20 s before the bulk instant and lasts as long as the drain is expected to."""
    due = (start + timedelta(seconds=args.runs / args.create_rate + 15)).replace(microsecond=0)
    bulk = [Planned(uuid.uuid4(), f"bulk{i % BULK_TENANTS}", due, start) for i in range(args.runs)]
    span_s = 20 + args.runs / args.drain_rate + 20
    count = int(span_s * args.urgent_rate)
    first = due - timedelta(seconds=20)
    urgent = []
    for k in range(count):
        at = first + timedelta(seconds=k / args.urgent_rate)
        urgent.append(Planned(uuid.uuid4(), URGENT, harness._to_ms(at), at - timedelta(seconds=5)))
    return due, bulk, urgent


def report_of(expected: list[Expected], calls: list[Call], tenants: set[str]) -> Report:
    return check(expected, [c for c in calls if c.tenant in tenants], now=datetime.now(UTC))


async def play(args: argparse.Namespace) -> dict[str, Any]:
    settings = local_settings()
    probe = Probe(settings)
    system = PeakSystem(settings, concurrency=args.concurrency + 8)
    async with Sink() as sink:
        await system.start(sink)
        try:
            await system._ensure_tenants([*(f"bulk{i}" for i in range(BULK_TENANTS)), URGENT])
            before = await asyncio.to_thread(probe.snapshot)
            load_before = os.getloadavg()
            start = datetime.now(UTC)
            due, bulk_plan, urgent_plan = plans(args, start)
            submit = lambda run: system._submit(run, sink)  # noqa: E731
            urgent_task = asyncio.create_task(harness.paced_submit(urgent_plan, submit, concurrency=8))
            t0 = time.monotonic()
            bulk = await harness.paced_submit(bulk_plan, submit, concurrency=args.concurrency)
            setup_s = time.monotonic() - t0
            load_setup = os.getloadavg()
            made = len(bulk.expected)
            print(
                f"setup: {made} bulk jobs in {setup_s:.1f} s ({made / setup_s:.0f}/s), errors {bulk.errors}", flush=True
            )
            urgent = await urgent_task
            everything = bulk.expected + urgent.expected
            await harness.wait_delivered(sink, everything, due + timedelta(seconds=args.max_drain))
            after = await asyncio.to_thread(probe.snapshot)
        finally:
            await system.stop()
            probe.close()
        calls = harness.to_checker_calls(sink.calls)
    return summary(args, due, setup_s, bulk, urgent, calls, after.minus(before), (load_before, load_setup))


def counts(report: Report) -> dict[str, Any]:
    """The checker's report with its id lists replaced by their lengths."""
    doc = asdict(report)
    doc.update(lost=len(report.lost), early=len(report.early), duplicates=sum(report.duplicates.values()))
    return doc


def slowest(submitted: Submitted, calls: list[Call], count: int = 10) -> list[dict[str, Any]]:
    """The latest first 2xx calls of these runs: when each was due, how late it started and how long its create
    took (to match with logs: a create still unanswered at the due instant makes the run late)."""
    expected = submitted.expected
    due = {e.run_id: e.due_at for e in expected}
    # `paced_submit` appends a run and its create's latency together, so the two lists align
    created_s = {e.run_id: latency for e, latency in zip(expected, submitted.latencies_s, strict=True)}
    first: dict[uuid.UUID, datetime] = {}
    for c in calls:
        if c.run_id in due and 200 <= c.status < 300:
            first[c.run_id] = min(first.get(c.run_id, c.received_at), c.received_at)
    lags = sorted(((at - due[r]).total_seconds(), r) for r, at in first.items())[-count:]
    return [
        {"run_id": str(r), "due": due[r].isoformat(), "lag_s": round(lag, 3), "create_s": round(created_s[r], 3)}
        for lag, r in reversed(lags)
    ]


def summary(
    args: argparse.Namespace,
    due: datetime,
    setup_s: float,
    bulk: Submitted,
    urgent: Submitted,
    calls: list[Call],
    delta: Any,
    loads: tuple[Any, Any],
) -> dict[str, Any]:
    bulk_tenants = {f"bulk{i}" for i in range(BULK_TENANTS)}
    bulk_report = report_of(bulk.expected, calls, bulk_tenants)
    urgent_report = report_of(urgent.expected, calls, {URGENT})
    bulk_at = [c.received_at for c in calls if c.tenant in bulk_tenants and 200 <= c.status < 300]
    drain_s = (max(bulk_at) - due).total_seconds() if bulk_at else 0.0
    wanted = {e.run_id for e in bulk.expected}
    over = sum(1 for c in calls if c.run_id in wanted and (c.received_at - due).total_seconds() > TOLERANCE_S)
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "args": vars(args),
        "loadavg": {"before": loads[0], "after_setup": loads[1], "end": os.getloadavg()},
        "due": due.isoformat(),
        "setup": {
            "jobs": len(bulk.expected),
            "seconds": round(setup_s, 1),
            "creates_per_s": round(len(bulk.expected) / setup_s, 1),
            "errors": bulk.errors,
            "latency_s": lag_summary(bulk.latencies_s),
        },
        "bulk": {
            "report": counts(bulk_report),
            "drain_s": round(drain_s, 1),
            "runs_per_s": round(bulk_report.delivered / drain_s, 1) if drain_s else 0.0,
            "over_tolerance": over,
        },
        "urgent": {
            "submitted": len(urgent.expected),
            "errors": urgent.errors,
            "late": urgent.late,
            "create_latency_s": lag_summary(urgent.latencies_s),
            "report": counts(urgent_report),
        },
        "urgent_slowest": slowest(urgent, calls),
        "delta": asdict(delta),
        "per_run": per_run(delta, bulk_report.delivered + urgent_report.delivered),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20_000, help="bulk runs due at the same instant")
    p.add_argument(
        "--create-rate", type=float, default=200.0, help="creates/s the setup is planned for (sets the due instant)"
    )
    p.add_argument(
        "--drain-rate", type=float, default=150.0, help="runs/s expected (sets how long the urgent trickle lasts)"
    )
    p.add_argument("--urgent-rate", type=float, default=2.0, help="urgent runs per second")
    p.add_argument("--concurrency", type=int, default=64, help="bulk creates in flight")
    p.add_argument("--max-drain", type=float, default=900.0, help="seconds after the due instant to give up waiting")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    doc = asyncio.run(play(args))
    harness.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    target = harness.RESULTS_DIR / f"peak-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    target.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    b, u = doc["bulk"], doc["urgent"]["report"]
    r = b["report"]
    print(f"bulk: delivered {r['delivered']}/{doc['setup']['jobs']}, lost {r['lost']}, duplicates {r['duplicates']}")
    print(f"  drain {b['drain_s']} s ({b['runs_per_s']}/s), over tolerance {b['over_tolerance']}, lag {r['lag_s']}")
    print(f"urgent: delivered {u['delivered']}/{doc['urgent']['submitted']}, lost {u['lost']}, lag {u['lag_s']}")
    print(f"  creates late {doc['urgent']['late']}, create latency {doc['urgent']['create_latency_s']}")
    print("cpu ms/run:", doc["per_run"].get("cpu_ms"), "load", doc["loadavg"])
    print(f"results: {target}")
    return 0 if b["report"]["lost"] == 0 and u["lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
