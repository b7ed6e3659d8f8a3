"""APScheduler 3.x as a peer: date triggers in a persistent SQLAlchemy job store (SQLite), thread pool executor.

APScheduler is a library: the scheduler lives in the process that adds the jobs. So the benchmark starts one
scheduler process (`--serve`), which starts its `BackgroundScheduler`, waits for the plan file, adds each job at
its submit instant (the harness's pacing) and keeps firing until stopped. Each job makes the harness's HTTP
call. `misfire_grace_time=None`: a late job still runs (APScheduler's default of 1 s would silently skip it,
which would count as lost, not late).

    .venv/bin/python -m benchmarks.peers.apscheduler_bench --runs 2000 --window 60
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler

from benchmarks.peers import harness
from benchmarks.peers.harness import Planned, Submitted
from tickwheel.dev.checker import Expected
from tickwheel.dev.sink import Sink
from tickwheel.dev.stack import process

SCHEDULER = "apscheduler"
POLL_S = 0.05


class APSchedulerSystem:
    name = "apscheduler"

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.dir = harness.WORK_DIR / SCHEDULER
        self._pid: int | None = None

    async def start(self, sink: Sink) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        for name in ("jobs.sqlite", "plan.json", "submitted.json", "ready"):
            (self.dir / name).unlink(missing_ok=True)
        argv = [
            sys.executable,
            "-m",
            "benchmarks.peers.apscheduler_bench",
            "--serve",
            str(self.dir),
            "--threads",
            str(self.threads),
        ]
        self._pid = harness.spawn_peer(SCHEDULER, argv)
        await self._wait_for(self.dir / "ready", 60.0)

    async def prepare(self, tenants: Sequence[str]) -> None:
        """Nothing to make: tenants are only paths of the sink's URL here."""

    async def schedule(self, plan: list[Planned], sink: Sink) -> Submitted:
        doc = {"runs": [r.to_json() for r in plan], "urls": {r.tenant: harness.sink_url(sink, r.tenant) for r in plan}}
        partial = self.dir / "plan.json.part"
        partial.write_text(json.dumps(doc))
        partial.rename(self.dir / "plan.json")  # atomic: the scheduler never reads half a plan
        last_submit = max((r.submit_at for r in plan), default=None)
        wait_s = 60.0 + ((last_submit.timestamp() - time.time()) if last_submit else 0.0)
        await self._wait_for(self.dir / "submitted.json", wait_s)
        return _submitted_from_json(json.loads((self.dir / "submitted.json").read_text()))

    def pids(self) -> list[int]:
        return [self._pid] if self._pid else []

    def server_pids(self) -> list[int]:
        return []  # SQLite is inside the scheduler process

    async def stop(self) -> None:
        await asyncio.to_thread(harness.stop_peer, SCHEDULER, self._pid)

    async def _wait_for(self, path: Path, timeout_s: float) -> None:
        alive = lambda: bool(self._pid and process.is_running(self._pid))  # noqa: E731
        if not await asyncio.to_thread(_wait_file, path, timeout_s, alive):
            log = process.log_path(harness.WORK_DIR, SCHEDULER)
            raise RuntimeError(f"no {path.name} from the scheduler; last lines of {log}:\n{process.tail(log, 30)}")


def _wait_file(path: Path, timeout_s: float, alive: Callable[[], bool] = lambda: True) -> bool:
    """Poll for a file the other process writes (atomically, by rename); False on timeout or when it died."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline or not alive():
            return False
        time.sleep(POLL_S)
    return True


def _submitted_from_json(doc: dict[str, Any]) -> Submitted:
    expected = [Expected(p.run_id, p.tenant, p.due_at) for p in map(Planned.from_json, doc.pop("expected"))]
    return Submitted(expected=expected, **doc)


# --- the scheduler process -----------------------------------------------------------------------------------


def make_scheduler(db_path: Path, threads: int) -> BackgroundScheduler:
    return BackgroundScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=f"sqlite:///{db_path}")},
        executors={"default": ThreadPoolExecutor(max_workers=threads)},
        job_defaults={"misfire_grace_time": None, "coalesce": False, "max_instances": 1},
        timezone="UTC",
    )


async def serve(workdir: Path, threads: int) -> None:
    """Start the scheduler, add the plan's jobs at their submit instants, then keep firing until SIGTERM."""
    scheduler = make_scheduler(workdir / "jobs.sqlite", threads)
    scheduler.start()
    (workdir / "ready").touch()
    plan_path = workdir / "plan.json"
    await asyncio.to_thread(_wait_file, plan_path, float("inf"))
    doc = json.loads(plan_path.read_text())
    plan = [Planned.from_json(r) for r in doc["runs"]]
    urls: dict[str, str] = doc["urls"]

    async def submit(run: Planned) -> Expected:
        job_id = str(run.run_id)
        await asyncio.to_thread(
            scheduler.add_job,
            harness.call_sink,
            "date",
            run_date=run.due_at,
            args=[urls[run.tenant], job_id],
            id=job_id,
        )
        return Expected(run.run_id, run.tenant, run.due_at)

    submitted = await harness.paced_submit(plan, submit)
    by_id = {r.run_id: r for r in plan}
    out = asdict(submitted)
    out["expected"] = [by_id[e.run_id].to_json() for e in submitted.expected]
    (workdir / "submitted.json.part").write_text(json.dumps(out))
    (workdir / "submitted.json.part").rename(workdir / "submitted.json")
    await asyncio.Event().wait()


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, default=32, help="executor threads (default %(default)s)")


def main() -> int:
    if "--serve" in sys.argv:
        p = argparse.ArgumentParser()
        p.add_argument("--serve", type=Path, required=True)
        p.add_argument("--threads", type=int, default=32)
        args = p.parse_args()
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
        asyncio.run(serve(args.serve, args.threads))
        return 0
    return harness.main(
        lambda args: APSchedulerSystem(args.threads), "APScheduler 3.x, date triggers, SQLite", _options
    )


if __name__ == "__main__":
    sys.exit(main())
