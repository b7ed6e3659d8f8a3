"""Failover benchmark: two `tickwheel dispatcher` processes and a `tickwheel coordinator` (real processes, the
production ZooKeeper session timeout of 10 s, 1024 shards unless --shards), N one-off runs due evenly over a
window, written and announced as the API does; one dispatcher gets SIGKILL (a crash) or SIGTERM (a rolling
restart) a third of the way in. Reports, for the runs of the shards the signalled dispatcher owned and due after
the signal, the fire lag (first time a run reaches its lane topic minus its due time) p50 / p99 / max, lost runs
and duplicate fires (a re-fire reaches the lane topic twice; the worker's claim makes the second call a no-op).
`--code DIR` runs the three processes from another source tree (e.g. `git archive main`) for a side-by-side.

    .venv/bin/python -m benchmarks.failover_bench --mode sigkill --runs 500 --window-s 30
    .venv/bin/python -m benchmarks.failover_bench --mode sigterm --runs 500 --window-s 30

`--mode sigkill-restart` is the soak's "kill-dispatcher" fault: one-off runs keep being written (due 5-20 s ahead,
`--rate` a second, from `--warmup-s` before the kill, so the shards have minutes of fired runs behind them), one
dispatcher gets SIGKILL and is started again 5 s later, as the nemesis does, and the runs due from the kill to
`--window-s` after it are measured: fire lag of every run (both dispatchers' shards: the survivor takes the dead
one's shards, then gives half of them to the newcomer), and the runs sent again, by whom and how long after their
due time (a take-over re-fires what the previous owner may not have sent; those are lane messages and claims).

    .venv/bin/python -m benchmarks.failover_bench --mode sigkill-restart --rate 20 --warmup-s 90 --window-s 40

Uses its own keyspace (tw_bench_failover, dropped at the end), topic prefix and ZooKeeper chroot on the local stack.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from schemas.messages import LANES, DueRun, decode_assignment, decode_due_run, decode_member, topic_names
from tickwheel.bus.kafka import OFFSET_BEGINNING, KafkaConsumer, KafkaProducer, ensure_topics
from tickwheel.bus.near import announce
from tickwheel.commands import platform_topics, run_migrate
from tickwheel.coordination.zookeeper import ZooKeeper
from tickwheel.core.acquisition import LEAVING_TAG
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
        names = {m.owner for m in marks.values()}  # a mark tagged as handed over: its new owner is still reading it
        if len(marks) == shards and len(names) == 2 and not any(n.endswith(LEAVING_TAG) for n in names):
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


async def feed(
    store: CassandraStore, s: Settings, producer: KafkaProducer, rate: float, until: float, runs: dict[uuid.UUID, int]
) -> None:
    """Write and announce one-off runs due 5-20 s ahead, `rate` a second, until the monotonic `until` (as the soak's
    load generator makes them through the API); records run id -> due ms in `runs`."""
    near = topic_names(s.kafka.topic_prefix)["near"]
    rng, gate, tasks = random.Random(19), asyncio.Semaphore(32), []

    async def one() -> None:
        async with gate:
            job_id = uuid.uuid4()
            at = datetime.now(UTC) + timedelta(seconds=rng.uniform(5, 20))
            at = at.replace(microsecond=at.microsecond // 1000 * 1000)
            run = NewRun(run_id_for(job_id, at), job_id, "bench", 1, shard_of(job_id, s.shards), "default", at, at)
            await create_run(store, run, datetime.now(UTC))
            await announce(producer, near, due_run_for(run), partitions=s.kafka.near_partitions, shards=s.shards)
            runs[run.run_id] = int(at.timestamp() * 1000)

    started = time.monotonic()
    sent = 0
    while time.monotonic() < until:
        due = int((time.monotonic() - started) * rate)
        for _ in range(due - sent):
            tasks.append(asyncio.ensure_future(one()))
        sent = max(sent, due)
        await asyncio.sleep(0.05)
    await asyncio.gather(*tasks)


async def read_records(s: Settings, run_ids: set[uuid.UUID], timeout_s: float) -> list[tuple[DueRun, str]]:
    """Every fire of `run_ids` on the lane topics, with the name of the dispatcher process that sent it."""
    consumer = KafkaConsumer(s.kafka)
    names = topic_names(s.kafka.topic_prefix)
    await consumer.assign(
        [(names[lane], p, OFFSET_BEGINNING) for lane in LANES for p in range(s.kafka.lane_partitions)]
    )
    fired: list[tuple[DueRun, str]] = []
    seen: set[uuid.UUID] = set()
    deadline = time.monotonic() + timeout_s
    quiet = 0
    try:
        while time.monotonic() < deadline and quiet < 6:
            records = await consumer.poll(2000, 0.5)
            for r in records:
                run = decode_due_run(r.value)
                if run.run_id in run_ids:
                    fired.append((run, dict(r.headers).get("dispatcher", b"").decode()))
                    seen.add(run.run_id)
            quiet = quiet + 1 if not records and run_ids <= seen else 0
    finally:
        await consumer.close()
    return fired


@dataclasses.dataclass
class Bench:
    """A coordinator and two dispatchers on a keyspace and topics of their own (`bench_platform`)."""

    s: Settings
    store: CassandraStore
    producer: KafkaProducer
    procs: list[subprocess.Popen[bytes]]
    logs: Path


@contextlib.asynccontextmanager
async def bench_platform(tag: str, shards: int, code: str | None) -> AsyncIterator[Bench]:
    """Start the processes on a fresh namespace; stop them and drop the keyspace after."""
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
        yield Bench(s, store, producer, procs, logs)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            await asyncio.to_thread(proc.wait)
        await producer.close()
        await store.execute_raw(f"DROP KEYSPACE IF EXISTS {s.cassandra.keyspace}")
        await store.close()


async def kill_and_restart(rate: float, warmup_s: float, window_s: float, shards: int, code: str | None) -> None:
    """The soak's kill-dispatcher fault with the load running: see the module docstring."""
    runs: dict[uuid.UUID, int] = {}
    load_before = loadavg()
    async with bench_platform(f"restart{uuid.uuid4().hex[:6]}", shards, code) as b:
        load = asyncio.ensure_future(feed(b.store, b.s, b.producer, rate, time.monotonic() + warmup_s + window_s, runs))
        await asyncio.sleep(warmup_s)
        victim = b.procs[1]
        victim.send_signal(signal.SIGKILL)
        killed_ms = time.time() * 1000
        await asyncio.sleep(5)  # as the soak's nemesis
        b.procs.append(spawn("dispatcher", 3, b.s, b.logs, code))
        restarted_ms = time.time() * 1000
        await load
        await asyncio.sleep(25)  # the last runs are due up to 20 s after the load stops
        fired = await read_records(b.s, set(runs), timeout_s=90)
        await asyncio.to_thread(victim.wait, 60)
    report_restart(fired, runs, killed_ms, restarted_ms, window_s, b.procs[3].pid, (rate, warmup_s, shards, code))
    print(f"load average before/after: {load_before} / {loadavg()}")
    print(f"process logs: {b.logs}")


def loadavg() -> str:
    """The one-minute load average."""
    return Path("/proc/loadavg").read_text().split()[0]


def report_restart(
    fired: list[tuple[DueRun, str]],
    runs: dict[uuid.UUID, int],
    killed_ms: float,
    restarted_ms: float,
    window_s: float,
    newcomer_pid: int,
    config: tuple[float, float, int, str | None],
) -> None:
    rate, warmup_s, shards, code = config
    first: dict[uuid.UUID, int] = {}
    for run, _ in fired:
        first[run.run_id] = min(first.get(run.run_id, run.fired_at_ms or 0), run.fired_at_ms or 0)
    window = {r for r, due in runs.items() if killed_ms <= due < killed_ms + window_s * 1000}
    lags = [(first[r] - runs[r]) / 1000 for r in window if r in first]
    again = [(run, who) for run, who in fired if (run.fired_at_ms or 0) > first[run.run_id]]
    by_newcomer = [run for run, who in again if who.endswith(f"-{newcomer_pid}")]
    print(f"mode=sigkill-restart code={code or 'this checkout'} rate={rate}/s warmup={warmup_s}s shards={shards}")
    print(f"restarted {((restarted_ms - killed_ms) / 1000):.1f} s after the kill")
    print(f"runs written={len(runs)} fired={len(first)} lost={len(set(runs) - set(first))}")
    print(f"runs due in the {window_s:.0f} s from the kill: {len(window)} (fired {len(lags)})")
    print(f"  fire lag p50={pct(lags, 0.5):.3f}s p99={pct(lags, 0.99):.3f}s max={max(lags, default=0):.3f}s")
    late = sorted(((runs[r] - killed_ms) / 1000, (first[r] - runs[r]) / 1000) for r in window if r in first)
    worst = sorted(late, key=lambda x: -x[1])[:5]
    print("  worst (due s after the kill, lag s): " + ", ".join(f"({d:.1f}, {lag:.2f})" for d, lag in worst))
    print(f"sent again: {len(again)} fires ({len(by_newcomer)} by the restarted dispatcher)")
    before = [r for r in by_newcomer if r.fire_at_ms < restarted_ms]
    print(f"  by the restarted dispatcher, of runs due before it started: {len(before)}")


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
    async with bench_platform(f"{mode}{uuid.uuid4().hex[:6]}", shards, code) as b:
        victim = b.procs[1]
        victim_shards = await owned_by(b.s, victim.pid)
        start = datetime.now(UTC) + timedelta(seconds=3)
        runs = await schedule(b.store, b.s, b.producer, start, n, window_s)
        await asyncio.sleep(max(0.0, (start - datetime.now(UTC)).total_seconds()) + window_s / 3)
        victim.send_signal(signal.SIGKILL if mode == "sigkill" else signal.SIGTERM)
        signalled_ms = time.time() * 1000
        fired = await read_fired(b.s, set(runs), timeout_s=window_s + 60)
        exited = await asyncio.to_thread(victim.wait, 60)
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
    print(f"process logs: {b.logs}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["sigkill", "sigterm", "sigkill-restart"], required=True)
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--window-s", type=float, default=30.0)
    parser.add_argument("--shards", type=int, default=1024)
    parser.add_argument("--code", help="run the processes from this source tree (PYTHONPATH), e.g. main's")
    parser.add_argument("--rate", type=float, default=20.0, help="sigkill-restart: runs written a second")
    parser.add_argument("--warmup-s", type=float, default=90.0, help="sigkill-restart: load before the kill")
    args = parser.parse_args()
    if args.mode == "sigkill-restart":
        asyncio.run(kill_and_restart(args.rate, args.warmup_s, args.window_s, args.shards, args.code))
    else:
        asyncio.run(main(args.mode, args.runs, args.window_s, args.shards, args.code))
