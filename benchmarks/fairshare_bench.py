"""Fair share between tenants inside a lane: tenant A has N runs due at once, tenant B a few due in the same
second; how late do B's runs start while A's backlog drains?

    .venv/bin/python -m benchmarks.fairshare_bench --a-runs 20000 --b-runs 50 --compare

Writes the jobs and runs of both tenants (not timed), starts one `tickwheel worker` process (default lane,
platform defaults for flow limits, egress allowed to the loopback sink) and produces every DueRun onto the lane
at once, A's before B's (the order a dispatcher fires a second in which A's runs are due first: the worst
case for arrival order). The start lag of a run is when the sink received its first call minus the instant
the messages were produced (the due instant as the dispatcher fires it). Reports B's p50/p99/max start lag,
A's drain time, and the load average. Own keyspace (`tw_bench_fair`) and topic prefix on the local stack.
`--consumer-only` measures the lane consumer alone, in process, on the real Kafka: the same messages, and a
handler that stands for a run by sleeping `--call-ms` (no store, no flow limits, no HTTP), so the figure is the
fair-share mechanism's (read, decode, queue, order) and not the shared Cassandra's load; `--compare` runs it with
the readahead at 0 too.

`--env KEY=VALUE` passes settings to the worker (e.g. to compare a worker setting side by side); `--compare`
runs a second pass with fair share off (`TICKWHEEL_WORKER_FAIR_SHARE_READAHEAD=0`, arrival order) right after
the first, and prints both with the ratio of B's p99 start lag.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from benchmarks.worker_bench import ROOT, start_worker, write_runs
from schemas.messages import DueRun, encode, topic_names
from tickwheel.bus.kafka import KafkaProducer, ensure_topics
from tickwheel.commands import run_migrate
from tickwheel.dev.sink import Sink
from tickwheel.settings import Settings
from tickwheel.store.cassandra import CassandraStore
from worker.consumer import LaneConsumer

KEYSPACE = "tw_bench_fair"
WORKER_ENV = {
    "TICKWHEEL_CASSANDRA_KEYSPACE": KEYSPACE,
    "TICKWHEEL_KAFKA_LANE_PARTITIONS": "4",
    "TICKWHEEL_WORKER_LANES": "default",
    "TICKWHEEL_WORKER_EGRESS_ALLOW": "127.0.0.1/32",
    "TICKWHEEL_WORKER_TARGET_RATE_PER_S": "1000000",  # one sink host: the per-target limits are not the question
    "TICKWHEEL_WORKER_TARGET_CONCURRENCY": "100000",
    # No dispatcher runs here, so a run the tenant cap defers would never come back; the cap is the platform's
    # other (cruder) fairness and not what is measured.
    "TICKWHEEL_WORKER_TENANT_CONCURRENCY": "100000",
    "TICKWHEEL_WORKER_PORT": "0",
    "TICKWHEEL_LOG_LEVEL": "WARNING",
}


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def one_pass(
    settings: Settings, store: CassandraStore, sink: Sink, args: argparse.Namespace, extra_env: list[str]
) -> dict[str, Any]:
    prefix = f"fair{uuid.uuid4().hex[:6]}."
    env = {**os.environ, **WORKER_ENV, "TICKWHEEL_KAFKA_TOPIC_PREFIX": prefix, "TICKWHEEL_REDIS_KEY_PREFIX": prefix}
    env.update(dict(item.split("=", 1) for item in extra_env))
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
        a_done_when_b_done = len(first_call_lags(sink, f"/{prefix}A", produced_at))
        with contextlib.suppress(TimeoutError):  # a loaded box: report how far A got rather than nothing
            await sink.wait_for(f"/{prefix}A", args.a_runs, timeout_s=args.timeout)
        a_lags = first_call_lags(sink, f"/{prefix}A", produced_at)
    finally:
        worker.terminate()
        worker.wait(30)
    # The worker may still be joining its group when the messages are produced (seconds on a loaded box): the
    # lags from the first call of either tenant are the fair-share figure, `first_call_s` is that start-up.
    first_call = min([*a_lags, *b_lags])
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "worker_env": extra_env,
        "first_call_s": round(first_call, 2),
        "b_start_lag_after_first_call_s": {
            q: round(quantile(b_lags, v) - first_call, 3) for q, v in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))
        },
        "a_runs": args.a_runs,
        "b_runs": args.b_runs,
        "loadavg": {"before": load_before, "end": os.getloadavg()},
        "b_start_lag_s": {q: round(quantile(b_lags, v), 3) for q, v in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))},
        "a_started_when_b_done": a_done_when_b_done,
        "a_started": len(a_lags),
        "a_drain_s": round(max(a_lags), 1),
        "a_runs_per_s": round(len(a_lags) / max(a_lags), 1),
    }


async def consumer_pass(settings: Settings, args: argparse.Namespace, readahead: int) -> dict[str, Any]:
    """A's and B's messages through one LaneConsumer whose handler sleeps `call_ms` per run."""
    prefix = f"fairc{uuid.uuid4().hex[:6]}."
    local = dataclasses.replace(
        settings,
        kafka=dataclasses.replace(settings.kafka, topic_prefix=prefix, lane_partitions=4),
        worker=dataclasses.replace(settings.worker, fair_share_readahead=readahead, commit_interval_s=1.0),
    )
    topic = topic_names(prefix)["default"]
    await ensure_topics(local.kafka, {topic: 4})
    dues = [_due(f"{prefix}A") for _ in range(args.a_runs)] + [_due(f"{prefix}B") for _ in range(args.b_runs)]
    producer = KafkaProducer(local.kafka)
    await asyncio.gather(*(producer.send(topic, encode(d), key=str(d.job_id).encode()) for d in dues))
    await producer.close()
    started: dict[str, list[float]] = {f"{prefix}A": [], f"{prefix}B": []}
    everything = asyncio.Event()

    async def handle(due: DueRun) -> None:
        started[due.tenant_id].append(time.time())
        if sum(len(v) for v in started.values()) == len(dues):
            everything.set()
        await asyncio.sleep(args.call_ms / 1000)

    consumer = LaneConsumer(local, "default", handle)
    load_before = os.getloadavg()
    running = asyncio.create_task(consumer.run())
    try:
        await asyncio.wait_for(everything.wait(), args.timeout)
    finally:
        consumer.stop()
        await running
    # Every message is in the topic before the consumer starts: lags count from its first run (joining the group
    # is not the question).
    began = min(min(v) for v in started.values())
    b_lags = [at - began for at in started[f"{prefix}B"]]
    a_lags = [at - began for at in started[f"{prefix}A"]]
    b_done = max(b_lags)
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "mode": "consumer-only",
        "fair_share_readahead": readahead,
        "slots": local.worker.concurrency_default,
        "call_ms": args.call_ms,
        "a_runs": args.a_runs,
        "b_runs": args.b_runs,
        "loadavg": {"before": load_before, "end": os.getloadavg()},
        "b_start_lag_s": {q: round(quantile(b_lags, v), 3) for q, v in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))},
        "a_started_when_b_done": sum(1 for lag in a_lags if lag <= b_done),
        "a_drain_s": round(max(a_lags), 1),
        "a_runs_per_s": round(len(a_lags) / max(a_lags), 1),
    }


def _due(tenant: str) -> DueRun:
    now_ms = int(time.time() * 1000)
    return DueRun(uuid.uuid4(), uuid.uuid4(), tenant, 0, 0, "run", "default", 1, now_ms, now_ms)


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
    if args.consumer_only:
        passes = [await consumer_pass(settings, args, settings.worker.fair_share_readahead)]
        if args.compare:
            passes.append(await consumer_pass(settings, args, 0))
        print(json.dumps(with_ratio(passes, args.compare), indent=2))
        return
    settings = dataclasses.replace(settings, cassandra=dataclasses.replace(settings.cassandra, keyspace=KEYSPACE))
    await run_migrate(settings)
    store = await CassandraStore.connect(settings.cassandra)
    try:
        async with Sink() as sink:
            passes = [await one_pass(settings, store, sink, args, args.env)]
            if args.compare:
                off = [*args.env, "TICKWHEEL_WORKER_FAIR_SHARE_READAHEAD=0"]
                passes.append(await one_pass(settings, store, sink, args, off))
            print(json.dumps(with_ratio(passes, args.compare), indent=2))
    finally:
        await store.close()


def with_ratio(passes: list[dict[str, Any]], compared: bool) -> dict[str, Any]:
    report: dict[str, Any] = {"passes": passes}
    if compared:
        on, off = (p["b_start_lag_s"]["p99"] for p in passes)
        report["b_p99_off_over_on"] = round(off / on, 1) if on else None
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a-runs", type=int, default=20_000)
    parser.add_argument("--b-runs", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the worker process")
    parser.add_argument("--compare", action="store_true", help="a second pass with fair share off")
    parser.add_argument("--consumer-only", action="store_true", help="the lane consumer alone, handler sleeps")
    parser.add_argument("--call-ms", type=float, default=500.0, help="--consumer-only: how long a run takes")
    asyncio.run(main(parser.parse_args()))
