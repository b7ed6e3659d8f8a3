"""A Cassandra node that comes back slow: store calls at a steady rate while one node of a three-node cluster is
stopped, restarted and then kept slow (SIGSTOP/SIGCONT, a small share of each period running) for `--slow-s`:
errors and latency per phase, for one source tree or several side by side (ABBA).

Run 8 of the nemesis soak saw a node restarted at load ~50 answer slowly for a minute after the driver saw it UP;
the stops and starts here are the stack's own, the slowness after the restart is imposed (a box quiet enough to
restart a node in seconds does not reproduce it by itself). The load is what the API's job routes send: a keyed
create (`jobs.create_keyed_job`: the job's LWT, then its rows' batch) and a read of a job and its run (GET
/v1/jobs/{id}), each call on its own task (an open loop: a slow call does not slow the rate). An error is a call
that raised `Unavailable` (the API's 503) or took longer than 15 s (the soak's HTTP client gives up then).

    flock /work/bench.lock .venv/bin/python -m benchmarks.rejoin_bench --stack-dir /work/coord9-cluster \\
        --code base=/tmp/coord9-base --code new=. --order base,new,new,base --node cassandra-2

The cluster needs only its Cassandra nodes (`tickwheel stack up --nodes 3 --hosts ... --dir D --only cassandra`).
Uses its own keyspace (tw_bench_rejoin).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

CLIENT_GIVES_UP_S = 15.0
KEYSPACE = "tw_bench_rejoin"


# -- the load (runs in a process of its own, from the tree under test) ------------------------------------------


class Load:
    """Keyed creates and reads on `store`, each call's outcome kept as one line."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.made: list[tuple[uuid.UUID, uuid.UUID]] = []
        self.lines: list[dict[str, Any]] = []
        self.in_flight: set[asyncio.Task[None]] = set()

    def start(self, kind: str) -> None:
        task = asyncio.create_task(self._timed(kind))
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)

    async def _timed(self, kind: str) -> None:
        from tickwheel.errors import Unavailable

        began, wall = time.monotonic(), time.time()
        error = None
        try:
            await (self._create() if kind == "create" else self._read())
        except Unavailable as exc:
            error = str(exc)[:160]
        self.lines.append({"t": wall, "kind": kind, "s": time.monotonic() - began, "error": error})

    async def _create(self) -> None:
        from schemas.messages import HttpTarget, JobDefinition, ScheduleDoc
        from tickwheel.core.ids import shard_of
        from tickwheel.store import jobs

        now = datetime.now(UTC).replace(microsecond=0)
        at = now + timedelta(hours=1)
        spec = JobDefinition(schedule=ScheduleDoc(type="once", run_at=at.isoformat()),
                             target=HttpTarget(url="https://example.com/hook"))  # fmt: skip
        job_id = uuid.uuid4()
        run = jobs.occurrence_run(job_id, "bench", shard_of(job_id, 256), 1, spec, at, retention_s=86_400)
        job = jobs.Job(job_id, "bench", run.shard, jobs.JobState.ACTIVE, 1, spec, spec.priority, run.scheduled_at,
                       run.run_id, 0, None, None, now, now)  # fmt: skip
        await jobs.create_keyed_job(self.store, job, run, now, "bench")
        self.made.append((job_id, run.run_id))

    async def _read(self) -> None:
        from tickwheel.store import jobs, runs

        if self.made:
            job_id, run_id = random.choice(self.made[-500:])
            await jobs.get_job(self.store, job_id)
            await runs.get_run(self.store, run_id)


async def load(stack_dir: Path, out: Path, creates_per_s: float, reads_per_s: float) -> None:
    """Keyed creates and reads at a steady rate until `out`.stop exists; one JSON line per call into `out`."""
    import dataclasses

    from tickwheel.settings import Settings
    from tickwheel.store.cassandra import CassandraStore
    from tickwheel.store.migrate import migrate

    settings = Settings.from_env({}, env_file=stack_dir / "env").cassandra
    settings = dataclasses.replace(settings, keyspace=KEYSPACE)
    await migrate(settings)
    calls = Load(await CassandraStore.connect(settings))
    stop = out.with_suffix(".stop")
    coordinators = getattr(calls.store, "_coordinators", None)  # the new tree's policy, None in the old one
    began, ticks, tick_s = time.monotonic(), 0, 0.05
    owed = {"create": 0.0, "read": 0.0}
    rates = {"create": creates_per_s, "read": reads_per_s}
    while not stop.exists():
        for kind, rate in rates.items():
            owed[kind] += rate * tick_s
            while owed[kind] >= 1:
                owed[kind] -= 1
                calls.start(kind)
        ticks += 1
        if coordinators is not None and ticks % 20 == 0:
            warming = sorted(str(host.endpoint) for host in coordinators.warming())
            calls.lines.append({"t": time.time(), "kind": "warming", "hosts": warming})
        await asyncio.sleep(max(0.0, began + ticks * tick_s - time.monotonic()))
    if calls.in_flight:
        await asyncio.wait(calls.in_flight, timeout=40)
    text = "".join(json.dumps(line) + "\n" for line in calls.lines)
    await asyncio.to_thread(out.write_text, text)
    await calls.store.close()


# -- the driver ---------------------------------------------------------------------------------------------------


class Marks:
    def __init__(self) -> None:
        self.at: dict[str, float] = {}

    def __call__(self, name: str) -> None:
        self.at[name] = time.time()
        print(f"  {time.strftime('%H:%M:%S')} {name}", flush=True)


def keep_slow(pid: int, seconds: float, running_s: float, period_s: float, done: threading.Event) -> None:
    """SIGSTOP the process for all but `running_s` of every `period_s`, for `seconds`; it is left running."""
    until = time.monotonic() + seconds
    try:
        while time.monotonic() < until and not done.is_set():
            os.kill(pid, signal.SIGSTOP)
            time.sleep(period_s - running_s)
            os.kill(pid, signal.SIGCONT)
            time.sleep(running_s)
    finally:
        os.kill(pid, signal.SIGCONT)


def one_run(args: argparse.Namespace, name: str, code: Path, out: Path) -> dict[str, Any]:
    """One stop, restart and slow spell of `args.node` under the load of tree `code`; the marks and the calls."""
    from tickwheel.dev.stack.lifecycle import stop_server
    from tickwheel.dev.stack.process import read_pid

    marks = Marks()
    env = {**os.environ, "PYTHONPATH": str(code.resolve())}
    out.unlink(missing_ok=True)
    out.with_suffix(".stop").unlink(missing_ok=True)
    print(f"{name} ({code}): load {os.getloadavg()[0]:.1f}", flush=True)
    worker = subprocess.Popen(
        [sys.executable, __file__, "load", "--stack-dir", str(args.stack_dir), "--out", str(out),
         "--creates-per-s", str(args.creates_per_s), "--reads-per-s", str(args.reads_per_s)],
        cwd=code, env=env,
    )  # fmt: skip
    try:
        time.sleep(args.warm_s)
        marks("before")
        time.sleep(args.before_s)
        marks("stop")
        stop_server(args.stack_dir, args.node)
        time.sleep(args.down_s)
        marks("restart")
        subprocess.run(
            [sys.executable, "-m", "tickwheel.dev.stack", "up", "--dir", str(args.stack_dir), "--only", args.node],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        marks("up")
        pid = read_pid(args.stack_dir, args.node)
        if pid is None:
            raise RuntimeError(f"{args.node} has no pid after its restart")
        done = threading.Event()
        keep_slow(pid, args.slow_s, args.running_s, args.period_s, done)
        marks("slow_end")
        time.sleep(args.after_s)
        marks("end")
    finally:
        out.with_suffix(".stop").touch()
        worker.wait(timeout=120)
    calls = [json.loads(line) for line in out.read_text().splitlines()]
    return {"name": name, "code": str(code), "marks": marks.at, "calls": calls, "load": os.getloadavg()[0]}


PHASES = (
    ("before", "before", "stop"),
    ("down", "stop", "up"),
    ("slow", "up", "slow_end"),
    ("after", "slow_end", "end"),
)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def table(runs: list[dict[str, Any]]) -> str:
    """Per run and phase: calls, errors (503 or over 15 s), latency p50 / p99 / max, for creates and reads."""
    rows = ["| run | phase | s | creates | errors | p50 s | p99 s | max s | reads | errors | p50 s | p99 s | max s |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for run in runs:
        for phase, start, end in PHASES:
            lo, hi = run["marks"][start], run["marks"][end]
            cells = [run["name"], phase, f"{hi - lo:.0f}"]
            for kind in ("create", "read"):
                calls = [c for c in run["calls"] if c["kind"] == kind and lo <= c["t"] < hi]
                errors = sum(1 for c in calls if c["error"] or c["s"] > CLIENT_GIVES_UP_S)
                times = [c["s"] for c in calls]
                quantiles = [percentile(times, 0.5), percentile(times, 0.99), max(times, default=0)]
                cells += [str(len(calls)), str(errors), *(f"{q:.2f}" for q in quantiles)]
            rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", nargs="?", default="run", choices=("run", "load"))
    parser.add_argument("--stack-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path("/tmp/rejoin-bench"))
    parser.add_argument("--code", action="append", default=[], help="NAME=DIR: a source tree to run the load from")
    parser.add_argument("--order", default="", help="names of --code trees in run order (ABBA: base,new,new,base)")
    parser.add_argument("--node", default="cassandra-2")
    parser.add_argument("--creates-per-s", type=float, default=5.0)
    parser.add_argument("--reads-per-s", type=float, default=10.0)
    parser.add_argument("--warm-s", type=float, default=15.0)
    parser.add_argument("--before-s", type=float, default=15.0)
    parser.add_argument("--down-s", type=float, default=10.0)
    parser.add_argument("--slow-s", type=float, default=75.0)
    parser.add_argument("--running-s", type=float, default=0.3)
    parser.add_argument("--period-s", type=float, default=3.0)
    parser.add_argument("--after-s", type=float, default=15.0)
    args = parser.parse_args(argv)
    if args.mode == "load":
        asyncio.run(load(args.stack_dir, args.out, args.creates_per_s, args.reads_per_s))
        return 0
    trees = dict(item.split("=", 1) for item in args.code)
    order = [n for n in args.order.split(",") if n] or list(trees)
    args.out.mkdir(parents=True, exist_ok=True)
    done = []
    for index, name in enumerate(order):
        done.append(one_run(args, name, Path(trees[name]), args.out / f"{index}-{name}.jsonl"))
        (args.out / "runs.json").write_text(json.dumps(done))
    print(table(done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
