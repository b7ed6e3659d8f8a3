"""Failover benchmark: two `tickwheel dispatcher` processes and a `tickwheel coordinator` (real processes, the
production ZooKeeper session timeout of 10 s, 1024 shards unless --shards), N one-off runs due evenly over a
window, written and announced as the API does; one dispatcher gets SIGKILL (a crash) or SIGTERM (a rolling
restart) a third of the way in. Reports, for the runs of the shards the signalled dispatcher owned and due after
the signal, the fire lag (first time a run reaches its lane topic minus its due time) p50 / p99 / max, lost runs
and duplicate fires (a re-fire reaches the lane topic twice; the worker's claim makes the second call a no-op).
`--code DIR` runs the three processes from another source tree (e.g. `git archive main`) for a side-by-side.

    .venv/bin/python -m benchmarks.failover_bench --mode sigkill --runs 500 --window-s 30
    .venv/bin/python -m benchmarks.failover_bench --mode sigterm --runs 500 --window-s 30

Uses its own keyspace (tw_bench_failover, dropped at the end), topic prefix and ZooKeeper chroot on the local stack.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from schemas.messages import LANES, DueRun, decode_assignment, decode_due_run, decode_member, topic_names
from tickwheel.bus.kafka import OFFSET_BEGINNING, KafkaConsumer, KafkaProducer, ensure_topics
from tickwheel.bus.near import announce
from tickwheel.commands import platform_topics, run_migrate
from tickwheel.coordination.zookeeper import ZooKeeper
from tickwheel.core.ids import run_id_for, shard_of
from tickwheel.dev.platform import local_settings
from tickwheel.settings import Settings
from tickwheel.store import checkpoints
from tickwheel.store.buckets import due_run_for
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.runs import NewRun, create_run

ROOT = Path(__file__).resolve().parents[1]
TICKWHEEL = str(Path(sys.executable).parent / "tickwheel")


def bench_settings(tag: str, shards: int) -> Settings:
    base = local_settings()
    return dataclasses.replace(
        base,
        shards=shards,
        cassandra=dataclasses.replace(base.cassandra, keyspace="tw_bench_failover"),
        kafka=dataclasses.replace(base.kafka, topic_prefix=f"bench.{tag}.", lane_partitions=4, near_partitions=8),
        zookeeper=dataclasses.replace(base.zookeeper, chroot=f"/tw-bench/{tag}", session_timeout_s=10.0),
    )


def process_env(s: Settings, code: str | None = None) -> dict[str, str]:
    free_ports = dataclasses.replace(
        s, dispatcher=dataclasses.replace(s.dispatcher, port=0), coordinator=dataclasses.replace(s.coordinator, port=0)
    )
    env = free_ports.process_env()
    if code:  # run the processes from another checkout (e.g. `git archive main`) to compare side by side
        env["PYTHONPATH"] = code
    return env


def spawn(process: str, index: int, s: Settings, logs: Path, code: str | None) -> subprocess.Popen[bytes]:
    with open(logs / f"{process}-{index}.log", "wb") as log:  # the child keeps its own descriptor
        return subprocess.Popen([TICKWHEEL, process], cwd=ROOT, env=process_env(s, code), stdout=log, stderr=log)


async def owned_by(s: Settings, pid: int) -> set[int]:
    zk = ZooKeeper(s.zookeeper)
    await zk.start()
    try:
        data, _ = await zk.call("get", "/dispatchers/assignment")
        assignment = decode_assignment(data)
        for member in await zk.call("get_children", "/dispatchers/members"):
            raw, _ = await zk.call("get", f"/dispatchers/members/{member}")
            info = decode_member(raw)
            name = info.name if info is not None else raw.decode().split(":", 1)[-1]  # older data: host:name
            if name.endswith(f"-{pid}"):
                return {x for a, b in assignment.members.get(member, []) for x in range(a, b)}
    finally:
        await zk.stop()
    raise RuntimeError(f"no member znode for process {pid}")


async def until_two_owners(store: CassandraStore, shards: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        marks = await checkpoints.read(store, range(shards))
        if len(marks) == shards and len({m.owner for m in marks.values()}) == 2:
            return
        await asyncio.sleep(0.5)
    raise RuntimeError("the two dispatchers did not take every shard")


async def schedule(
    store: CassandraStore, s: Settings, producer: KafkaProducer, start: datetime, n: int, window_s: float
) -> dict[uuid.UUID, int]:
    """Write and announce n runs due evenly over the window; returns run id -> shard."""
    near = topic_names(s.kafka.topic_prefix)["near"]
    runs = {}
    for i in range(n):
        job_id = uuid.uuid4()
        at = start + timedelta(seconds=window_s * i / n)
        at = at.replace(microsecond=at.microsecond // 1000 * 1000)
        run = NewRun(run_id_for(job_id, at), job_id, "bench", 1, shard_of(job_id, s.shards), "default", at, at)
        await create_run(store, run, datetime.now(UTC))
        await announce(producer, near, due_run_for(run), partitions=s.kafka.near_partitions, shards=s.shards)
        runs[run.run_id] = run.shard
    return runs


async def read_fired(s: Settings, run_ids: set[uuid.UUID], timeout_s: float) -> list[DueRun]:
    consumer = KafkaConsumer(s.kafka)
    names = topic_names(s.kafka.topic_prefix)
    await consumer.assign(
        [(names[lane], p, OFFSET_BEGINNING) for lane in LANES for p in range(s.kafka.lane_partitions)]
    )
    fired: list[DueRun] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and not run_ids <= {f.run_id for f in fired}:
            fired += [decode_due_run(r.value) for r in await consumer.poll(1000, 0.5)]
        for _ in range(6):  # late duplicates
            fired += [decode_due_run(r.value) for r in await consumer.poll(1000, 0.5)]
    finally:
        await consumer.close()
    return [f for f in fired if f.run_id in run_ids]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


async def main(mode: str, n: int, window_s: float, shards: int, code: str | None) -> None:
    tag = f"{mode}{uuid.uuid4().hex[:6]}"
    s = bench_settings(tag, shards)
    await run_migrate(s)
    await ensure_topics(s.kafka, platform_topics(s))
    store = await CassandraStore.connect(s.cassandra)
    producer = KafkaProducer(s.kafka)
    await store.execute("TRUNCATE shard_checkpoints")
    logs = Path(tempfile.mkdtemp(prefix="failover-bench-"))
    procs = [spawn(name, i, s, logs, code) for i, name in enumerate(("coordinator", "dispatcher", "dispatcher"))]
    try:
        await until_two_owners(store, shards)
        victim = procs[1]
        victim_shards = await owned_by(s, victim.pid)
        start = datetime.now(UTC) + timedelta(seconds=3)
        runs = await schedule(store, s, producer, start, n, window_s)
        await asyncio.sleep(max(0.0, (start - datetime.now(UTC)).total_seconds()) + window_s / 3)
        victim.send_signal(signal.SIGKILL if mode == "sigkill" else signal.SIGTERM)
        signalled_ms = time.time() * 1000
        fired = await read_fired(s, set(runs), timeout_s=window_s + 60)
        exited = await asyncio.to_thread(victim.wait, 60)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            await asyncio.to_thread(proc.wait)
        await producer.close()
        await store.execute_raw(f"DROP KEYSPACE IF EXISTS {s.cassandra.keyspace}")
        await store.close()
    first: dict[uuid.UUID, DueRun] = {}
    for f in fired:
        if f.run_id not in first or (f.fired_at_ms or 0) < (first[f.run_id].fired_at_ms or 0):
            first[f.run_id] = f
    affected = [f for f in first.values() if f.shard in victim_shards and f.fire_at_ms >= signalled_ms]
    lags = [((f.fired_at_ms or 0) - f.fire_at_ms) / 1000 for f in affected]
    others = [((f.fired_at_ms or 0) - f.fire_at_ms) / 1000 for f in first.values() if f.shard not in victim_shards]
    print(f"mode={mode} code={code or 'this checkout'} runs={n} window={window_s}s shards={shards}")
    print(f"session_timeout=10s signalled process exit code={exited}")
    print(f"lost={len(set(runs) - set(first))} duplicate_fires={len(fired) - len(first)}")
    print(f"affected runs (signalled dispatcher's shards, due after the signal): {len(affected)}")
    print(f"  fire lag p50={pct(lags, 0.5):.3f}s p99={pct(lags, 0.99):.3f}s max={max(lags, default=0):.3f}s")
    print(f"other runs: {len(others)} fire lag p50={pct(others, 0.5):.3f}s p99={pct(others, 0.99):.3f}s")
    print(f"process logs: {logs}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["sigkill", "sigterm"], required=True)
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--window-s", type=float, default=30.0)
    parser.add_argument("--shards", type=int, default=1024)
    parser.add_argument("--code", help="run the processes from this source tree (PYTHONPATH), e.g. main's")
    args = parser.parse_args()
    asyncio.run(main(args.mode, args.runs, args.window_s, args.shards, args.code))
