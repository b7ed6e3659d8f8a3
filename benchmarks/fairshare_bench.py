"""Fair share between tenants inside a lane: tenant A has N runs due at once, tenant B a few due in the same
second; how late do B's runs start while A's backlog drains?

    .venv/bin/python -m benchmarks.fairshare_bench --a-runs 20000 --b-runs 50

Writes the jobs and runs of both tenants (not timed), starts one `tickwheel worker` process (default lane,
platform defaults for flow limits, egress allowed to the loopback sink) and produces every DueRun onto the lane
at once, A's before B's (the order a dispatcher fires a second in which A's runs are due first: the worst
case for arrival order). The start lag of a run is when the sink received its first call minus the instant
the messages were produced (the due instant as the dispatcher fires it). Reports B's p50/p99/max start lag,
A's drain time, and the load average. Own keyspace (`tw_bench_fair`) and topic prefix on the local stack.
`--env KEY=VALUE` passes settings to the worker (e.g. to compare a worker setting side by side).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from benchmarks.worker_bench import ROOT, start_worker, write_runs
from schemas.messages import encode, topic_names
from tickwheel.bus.kafka import KafkaProducer
from tickwheel.commands import run_migrate
from tickwheel.dev.sink import Sink
from tickwheel.settings import Settings
from tickwheel.store.cassandra import CassandraStore

KEYSPACE = "tw_bench_fair"
WORKER_ENV = {
    "TICKWHEEL_CASSANDRA_KEYSPACE": KEYSPACE,
    "TICKWHEEL_KAFKA_LANE_PARTITIONS": "4",
    "TICKWHEEL_WORKER_LANES": "default",
    "TICKWHEEL_WORKER_EGRESS_ALLOW": "127.0.0.1/32",
    "TICKWHEEL_WORKER_TARGET_RATE_PER_S": "1000000",  # one sink host: the per-target limits are not the question
    "TICKWHEEL_WORKER_TARGET_CONCURRENCY": "100000",
    "TICKWHEEL_WORKER_PORT": "0",
    "TICKWHEEL_LOG_LEVEL": "WARNING",
}


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def one_pass(settings: Settings, store: CassandraStore, sink: Sink, args: argparse.Namespace) -> dict[str, Any]:
    prefix = f"fair{uuid.uuid4().hex[:6]}."
    env = {**os.environ, **WORKER_ENV, "TICKWHEEL_KAFKA_TOPIC_PREFIX": prefix, "TICKWHEEL_REDIS_KEY_PREFIX": prefix}
    env.update(dict(item.split("=", 1) for item in args.env))
    local = dataclasses.replace(settings, kafka=dataclasses.replace(settings.kafka, topic_prefix=prefix))
    await run_migrate(local)
    big = await write_runs(store, local, sink.url(f"/{prefix}A"), args.a_runs, tenant=f"{prefix}A")
    small = await write_runs(store, local, sink.url(f"/{prefix}B"), args.b_runs, tenant=f"{prefix}B")
    worker = start_worker(env)
    try:
        await asyncio.sleep(6)  # connect and join the group
        producer = KafkaProducer(local.kafka)
        topic = topic_names(prefix)["default"]
        load_before = os.getloadavg()
        produced_at = time.time()
        await asyncio.gather(*(producer.send(topic, encode(d), key=str(d.job_id).encode()) for d in big + small))
        await producer.close()
        await sink.wait_for(f"/{prefix}B", args.b_runs, timeout_s=args.timeout)
        b_lags = first_call_lags(sink, f"/{prefix}B", produced_at)
        await sink.wait_for(f"/{prefix}A", args.a_runs, timeout_s=args.timeout)
        a_lags = first_call_lags(sink, f"/{prefix}A", produced_at)
    finally:
        worker.terminate()
        worker.wait(30)
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "worker_env": args.env,
        "a_runs": args.a_runs,
        "b_runs": args.b_runs,
        "loadavg": {"before": load_before, "end": os.getloadavg()},
        "b_start_lag_s": {q: round(quantile(b_lags, v), 3) for q, v in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))},
        "a_drain_s": round(max(a_lags), 1),
        "a_runs_per_s": round(args.a_runs / max(a_lags), 1),
    }


def first_call_lags(sink: Sink, path: str, produced_at: float) -> list[float]:
    """Per run (webhook-id), its first call's arrival minus `produced_at`."""
    first: dict[str, float] = {}
    for call in sink.calls_to(path):
        run_id = call.header("webhook-id") or ""
        first[run_id] = min(first.get(run_id, call.received_at), call.received_at)
    return [at - produced_at for at in first.values()]


async def main(args: argparse.Namespace) -> None:
    os.environ.setdefault("TICKWHEEL_ENV_FILE", str(ROOT / ".stack" / "env"))
    settings = Settings.from_env()
    settings = dataclasses.replace(settings, cassandra=dataclasses.replace(settings.cassandra, keyspace=KEYSPACE))
    await run_migrate(settings)
    store = await CassandraStore.connect(settings.cassandra)
    try:
        async with Sink() as sink:
            print(json.dumps(await one_pass(settings, store, sink, args), indent=2))
    finally:
        await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a-runs", type=int, default=20_000)
    parser.add_argument("--b-runs", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the worker process")
    asyncio.run(main(parser.parse_args()))
