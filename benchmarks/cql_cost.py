"""What one delivered run costs Cassandra and the driver, without the platform: the statements of a keyed
once-run (create LWT + batch, job read, claim batch + LWT, outcome LWT + batch) replayed through the store's
own functions at a fixed rate, with the CPU of this process (the driver's share) and of the Cassandra server
(/proc) per run. Kafka, Redis, HTTP and the scheduling around the statements are left out, so a server or
driver setting can be compared in a minute, on a quiet or noisy box alike (compare side by side).

    .venv/bin/python -m benchmarks.cql_cost --cassandra 127.0.0.4:29042 --pid <cassandra pid> --rate 150 \
        --seconds 30 --warmup 20 [--set protocol_version=4] [--set compression=false] [--audit] \
        [--lwt-gc-grace-s 900]

`--audit` adds the create's audit row (`job_history`) to its batch, as the API writes it; `--lwt-gc-grace-s` gives
the LWT tables the gc_grace_seconds the stack's env gives the platform (900 s), which bounds the Paxos state a
node purging by `gc_grace` keeps (without it the tables keep Cassandra's 10 days, and so does the state).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta

import uvloop

from api.wire import definition_document
from benchmarks.fairshare_bench import quantile
from benchmarks.peers.harness import cpu_seconds
from benchmarks.peers.tickwheel_bench import once_job
from schemas.messages import decode_definition
from tickwheel.core.changes import json_diff
from tickwheel.core.horizon import RUN_RETENTION_S
from tickwheel.core.ids import shard_of
from tickwheel.settings import CassandraSettings
from tickwheel.store import audit, jobs, runs
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.migrate import migrate
from tickwheel.store.records import AttemptResult, Job, JobState, RunStatus


def new_job(tenant: str, due: datetime) -> Job:
    body = once_job(due, "http://127.0.0.1:9/sink", "cost")
    definition = decode_definition(json.dumps({**body, "payload": json.dumps(body["payload"])}))
    job_id = uuid.uuid4()
    return Job(
        job_id, tenant, shard_of(job_id), JobState.ACTIVE, 1, definition, "default", None, None, 0, None, None,
        due, due,
    )  # fmt: skip


AUDIT_TTL_S = 90 * 86400  # retention.audit_days


def creation_row(job: Job, now: datetime) -> tuple[str, list[object]]:
    """The audit row a create writes in its batch (api.audit.creation_change): the whole definition as its diff."""
    view = {"state": job.state.value, **definition_document(job.definition)}
    change = audit.JobChangeRecord(
        job.job_id, job.tenant_id, now, job.version, "create", "cost", json_diff({}, view), {}
    )
    return audit.change_row(change, AUDIT_TTL_S)


async def one_run(store: CassandraStore, tenant: str, with_audit: bool = False) -> float:
    """The seven statements of a keyed once-run delivered at its first attempt (docs/architecture.md), the
    create's audit row in its batch if `with_audit`; returns how long they took, in seconds."""
    begun = time.monotonic()
    now = datetime.now(UTC)
    job = new_job(tenant, now + timedelta(seconds=5))
    run = jobs.run_of(job, now + timedelta(seconds=5), retention_s=RUN_RETENTION_S)
    job = dataclasses.replace(job, next_run_id=run.run_id)
    also = [creation_row(job, now)] if with_audit else []
    await jobs.create_keyed_job(store, job, run, now, "hash", also)
    await jobs.read_state(store, job.job_id)
    started = datetime.now(UTC)
    lease_until = started + timedelta(seconds=60)
    claimed = await runs.claim(store, run, 0, "cost-bench", lease_until, started)
    assert claimed.applied, claimed
    result = AttemptResult(RunStatus.SUCCEEDED, response_code=200)
    assert await runs.finish(store, run, 1, result, "cost-bench", started, datetime.now(UTC), lease_until)
    return time.monotonic() - begun


async def drive(
    store: CassandraStore, rate: float, seconds: float, took: list[float] | None = None, with_audit: bool = False
) -> int:
    """`rate` runs a second for `seconds`, each its statements in order, as many in flight as they take; each
    delivered run's duration is appended to `took`."""
    tasks: set[asyncio.Task[float]] = set()
    failed: list[BaseException] = []

    def done(task: asyncio.Task[float]) -> None:
        tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            failed.append(task.exception())  # type: ignore[arg-type]
        elif took is not None and not task.cancelled():
            took.append(task.result())

    start = time.monotonic()
    n = 0
    while (elapsed := time.monotonic() - start) < seconds:
        due = int(elapsed * rate) + 1
        while n < due:
            task = asyncio.create_task(one_run(store, f"cost{n % 4}", with_audit))
            tasks.add(task)
            task.add_done_callback(done)
            n += 1
        await asyncio.sleep(0.01)
    if tasks:
        await asyncio.wait(tasks)
    if failed:
        print(f"{len(failed)} of {n} runs failed, e.g. {failed[0]!r}", file=sys.stderr)
    return n - len(failed)


async def main_async(args: argparse.Namespace) -> dict[str, object]:
    settings = CassandraSettings(
        hosts=(args.cassandra,), keyspace=args.keyspace, lwt_gc_grace_s=args.lwt_gc_grace_s, driver_io=args.driver_io
    )
    await migrate(settings)
    store = await CassandraStore.connect(settings, driver_options=dict(kv.split("=", 1) for kv in args.set))
    await drive(store, args.rate, args.warmup, with_audit=args.audit)
    me, server = os.getpid(), args.pid
    t0, c0, s0 = time.monotonic(), cpu_seconds([me]), cpu_seconds([server])
    took: list[float] = []
    n = await drive(store, args.rate, args.seconds, took, args.audit)
    t1, c1, s1 = time.monotonic(), cpu_seconds([me]), cpu_seconds([server])
    await store.close()
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "set": args.set,
        "driver_io": args.driver_io,
        "audit": args.audit,
        "runs": n,
        "runs_per_s": round(n / (t1 - t0), 1),
        "client_ms_per_run": round(1000 * (c1 - c0) / n, 3),
        "cassandra_ms_per_run": round(1000 * (s1 - s0) / n, 3),
        # the run's seven statements one after the other, as the driver saw them (a GC pause shows here)
        "run_ms_p50_p99_max": [round(1000 * quantile(took, q), 1) for q in (0.5, 0.99, 1.0)],
        "loadavg": os.getloadavg(),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cassandra", required=True, help="host:port")
    p.add_argument("--pid", type=int, required=True, help="the Cassandra server's pid (its CPU is read from /proc)")
    p.add_argument("--keyspace", default="tw_cql_cost")
    p.add_argument("--rate", type=float, default=150.0)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--warmup", type=float, default=15.0)
    p.add_argument("--set", action="append", default=[], help="driver option KEY=VALUE (CassandraStore.connect)")
    p.add_argument("--audit", action="store_true", help="each create writes its audit row too, as the API's does")
    p.add_argument("--lwt-gc-grace-s", type=int, default=0, help="cassandra.lwt_gc_grace_s (the stack's env: 900)")
    p.add_argument("--driver-io", choices=("libev", "loop"), default="libev", help="cassandra.driver_io")
    print(json.dumps(uvloop.run(main_async(p.parse_args()))))  # the processes' loop (tickwheel.cli)


if __name__ == "__main__":
    main()
