"""tickwheel under the peers' workload, through its public HTTP API only.

Needs the platform running (`tickwheel up`) with a worker allowed to call the loopback sink
(`TICKWHEEL_WORKER_EGRESS_ALLOW=127.0.0.0/8`). Each harness tenant becomes a tickwheel tenant
(`tickwheel tenants create`, whose last output line is the API key); each planned run becomes a once-job
(`POST /v1/jobs`, `schedule.runAt` = its due instant) whose HTTP target is the sink. The run id the worker
will send is the `next_run_id` of the 201 answer.

    .venv/bin/python -m benchmarks.peers.tickwheel_bench --runs 2000 --window 60
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

import aiohttp

from benchmarks.peers import harness
from benchmarks.peers.harness import Planned, Submitted
from tickwheel.dev import stack
from tickwheel.dev.checker import Expected
from tickwheel.dev.platform import PROCESSES, local_settings
from tickwheel.dev.sink import Sink
from tickwheel.dev.stack import process
from tickwheel.settings import Settings

SERVERS = ("cassandra", "kafka", "zookeeper", "redis")


class SubmissionRefused(Exception):
    """The API did not answer 201."""


async def create_tenant(name: str) -> str:
    """A new tenant through the CLI; returns its API key (the command's last output line)."""
    cli = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tickwheel.cli", "tenants", "create", name,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await cli.communicate()
    lines = out.decode().strip().splitlines()
    if cli.returncode != 0 or not lines:
        raise RuntimeError(f"`tickwheel tenants create {name}` failed ({cli.returncode}): {err.decode()[-2000:]}")
    return lines[-1].strip()


def once_job(due_at: datetime, url: str, name: str) -> dict[str, object]:
    """The body of a once-job due at `due_at` that POSTs to `url` (also used by the Locust load tests)."""
    return {
        "schedule": {"type": "once", "runAt": instant(due_at)},
        "target": {"type": "http", "url": url, "method": "POST"},
        "payload": {"name": name},
        "name": name,
    }


def instant(at: datetime) -> str:
    """RFC 3339 in UTC with milliseconds, the precision of tickwheel's run ids."""
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class TickwheelSystem:
    name = "tickwheel"

    def __init__(
        self,
        settings: Settings,
        api_url: str | None = None,
        concurrency: int = 16,
        make_tenant: Callable[[str], Awaitable[str]] = create_tenant,
    ) -> None:
        self.settings = settings
        self.make_tenant = make_tenant  # name -> API key; tests make tenants in their own keyspace
        self.api_url = api_url or f"http://127.0.0.1:{settings.api.port}"
        self.concurrency = concurrency
        self.keys: dict[str, str] = {}
        self._http: aiohttp.ClientSession | None = None

    async def start(self, sink: Sink) -> None:
        self._http = aiohttp.ClientSession(
            base_url=self.api_url, connector=aiohttp.TCPConnector(limit=self.concurrency)
        )
        try:
            async with self._http.get("/readyz") as answer:
                ready = answer.status == 200
        except aiohttp.ClientError:
            ready = False
        if not ready:
            await self.stop()
            raise RuntimeError(f"the tickwheel API at {self.api_url} is not ready: start it with `tickwheel up`")

    async def prepare(self, tenants: Sequence[str]) -> None:
        """The tenants and their API keys, made before the plan's clock starts (a CLI process each)."""
        await self._ensure_tenants(list(tenants))

    async def schedule(self, plan: list[Planned], sink: Sink) -> Submitted:
        await self._ensure_tenants(sorted({r.tenant for r in plan}))
        return await harness.paced_submit(plan, lambda run: self._submit(run, sink), concurrency=self.concurrency)

    async def _ensure_tenants(self, labels: list[str]) -> None:
        stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
        for label in labels:
            if label not in self.keys:
                self.keys[label] = await self.make_tenant(f"bench-{stamp}-{label}")

    async def _submit(self, run: Planned, sink: Sink) -> Expected:
        assert self._http is not None, "start() first"
        headers = {"Authorization": f"Bearer {self.keys[run.tenant]}", "Idempotency-Key": str(run.run_id)}
        body = once_job(run.due_at, harness.sink_url(sink, run.tenant), f"bench-{run.run_id}")
        async with self._http.post("/v1/jobs", json=body, headers=headers) as answer:
            document = await answer.json(content_type=None)
            if answer.status != 201:
                raise SubmissionRefused(f"{answer.status}: {document}")
        return Expected(uuid.UUID(document["next_run_id"]), run.tenant, run.due_at)

    def pids(self) -> list[int]:
        pids = (process.read_pid(stack.stack_dir(), name) for name in PROCESSES)
        return [p for p in pids if p is not None]

    def server_pids(self) -> list[int]:
        return harness.stack_server_pids(*SERVERS)

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--api", default=None, help="API base URL (default http://127.0.0.1:<api port from settings>)")
    p.add_argument("--concurrency", type=int, default=16, help="submissions in flight (default %(default)s)")


def make(args: argparse.Namespace) -> TickwheelSystem:
    return TickwheelSystem(local_settings(), args.api, args.concurrency)


def main() -> int:
    return harness.main(make, "tickwheel through its HTTP API", _options)


if __name__ == "__main__":
    sys.exit(main())
