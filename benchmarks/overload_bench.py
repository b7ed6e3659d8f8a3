"""One API process offered more creates than it can take, then a light load: what it answers, how fast, and whether
it recovers (issue 19, admission control).

Starts `tickwheel api` from `--code` (a checkout or a `git archive` of the code to measure: the process imports
that directory's packages) on the local stack (.stack/env of the working directory), makes a tenant, then sends
creates open-loop (at a fixed rate, whatever the answers) at `--over-rate` for `--over-s` seconds, then at
`--after-rate` for `--after-s`. Each request has the soak's 15 s timeout and is not retried. Prints one JSON line:
per phase the offered count, 2xx, 503 (shed or not), timeouts and other errors, goodput (2xx/s), p50/p99 of the
2xx answers (from when the client sent each; its own lag behind the schedule is `client_late_p99_ms`), and for
the light phase the second from which every 5 s window answered >= 99% 2xx with p99 < 1 s (`recovered_after_s`;
null: it never did), plus the API's CPU.

    .venv/bin/python -m benchmarks.overload_bench --code /work/adm10-main --label main
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks.api_bench import BODY, cpu_s, start_api
from tickwheel.dev.platform import local_settings
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.tenants import create_tenant

WINDOW_S = 5.0


@dataclass
class Answer:
    """One request: when it was due to be sent (seconds from the phase's start), its status (0: timed out, -1: other
    error), how long it took from when the client sent it, and how late the client sent it (its own lag)."""

    sent_s: float
    status: int
    took_s: float
    late_s: float = 0.0


@dataclass
class Phase:
    name: str
    rate: float
    seconds: float
    answers: list[Answer] = field(default_factory=list)


def percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def recovered_after_s(phase: Phase) -> float | None:
    """The start of the first 5 s window from which every window answered >= 99% 2xx with p99 < 1 s."""
    windows = int(phase.seconds // WINDOW_S)
    good = []
    for index in range(windows):
        inside = [a for a in phase.answers if index * WINDOW_S <= a.sent_s < (index + 1) * WINDOW_S]
        ok = [a.took_s for a in inside if 200 <= a.status < 300]
        p99 = percentile(ok, 0.99)
        good.append(bool(inside) and len(ok) >= 0.99 * len(inside) and p99 is not None and p99 < 1.0)
    for index in range(windows):
        if all(good[index:]):
            return index * WINDOW_S
    return None


def summary(phase: Phase) -> dict[str, Any]:
    ok = [a.took_s for a in phase.answers if 200 <= a.status < 300]
    count = len(phase.answers)

    def share(n: int) -> float:
        return round(n / count, 4) if count else 0.0

    p50, p99 = percentile(ok, 0.5), percentile(ok, 0.99)
    late = percentile([a.late_s for a in phase.answers], 0.99)
    return {
        "offered": count,
        "ok": len(ok),
        "goodput_per_s": round(len(ok) / phase.seconds, 1),
        "p50_ms": None if p50 is None else round(p50 * 1000),
        "p99_ms": None if p99 is None else round(p99 * 1000),
        "shed_503": share(sum(a.status == 503 for a in phase.answers)),
        "timed_out": share(sum(a.status == 0 for a in phase.answers)),
        "other": share(sum(a.status not in (0, 503) and not 200 <= a.status < 300 for a in phase.answers)),
        "client_late_p99_ms": None if late is None else round(late * 1000),
    }


def shed_by_reason(exposition: str) -> dict[str, int]:
    """tickwheel_api_shed_total by reason, from the API's /metrics (empty: code without admission control)."""
    found = {}
    for line in exposition.splitlines():
        if line.startswith("tickwheel_api_shed_total{"):
            labels, _, value = line.rpartition(" ")
            found[labels.split('"')[1]] = int(float(value))
    return found


async def offer(http: aiohttp.ClientSession, url: str, phase: Phase, timeout_s: float) -> None:
    """Send creates at `phase.rate` for `phase.seconds` (open loop), and wait for every answer."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    tasks: list[asyncio.Task[None]] = []
    started = time.monotonic()

    async def one(sent_s: float) -> None:
        begun = time.monotonic() - started
        try:
            async with http.post(f"{url}/v1/jobs", json=BODY, timeout=timeout) as answer:
                await answer.read()
                status = answer.status
        except TimeoutError:
            status = 0
        except aiohttp.ClientError:
            status = -1
        phase.answers.append(Answer(sent_s, status, time.monotonic() - started - begun, begun - sent_s))

    sent = 0
    while (now := time.monotonic() - started) < phase.seconds:
        due = int(now * phase.rate) + 1
        for index in range(sent, min(due, int(phase.seconds * phase.rate))):
            tasks.append(asyncio.create_task(one(index / phase.rate)))
        sent = max(sent, due)
        await asyncio.sleep(0.005)
    await asyncio.gather(*tasks)


async def main(args: argparse.Namespace) -> None:
    store = await CassandraStore.connect(local_settings().cassandra)
    try:
        _, key = await create_tenant(store, f"overload-{time.time_ns()}", datetime.now(UTC))
    finally:
        await store.close()
    api = await start_api(args.port, code=Path(args.code))
    url = f"http://127.0.0.1:{args.port}"
    phases = [Phase("overload", args.over_rate, args.over_s), Phase("after", args.after_rate, args.after_s)]
    try:
        cpu_before = cpu_s(api.pid)
        connector = aiohttp.TCPConnector(limit=args.connections)
        headers = {"Authorization": f"Bearer {key}"}
        async with aiohttp.ClientSession(headers=headers, connector=connector) as http:
            load_before = os.getloadavg()[0]
            # The light phase starts when the overload stops sending, not when its last answer came.
            overload = asyncio.create_task(offer(http, url, phases[0], args.timeout_s))
            await asyncio.sleep(args.over_s)
            await offer(http, url, phases[1], args.timeout_s)
            await overload
            load_after = os.getloadavg()[0]
            async with http.get(f"{url}/metrics") as answer:
                shed = shed_by_reason(await answer.text())
        cpu_used = cpu_s(api.pid) - cpu_before
    finally:
        api.terminate()
        await api.wait()
    result: dict[str, Any] = {"label": args.label, "code": args.code, "at": datetime.now(UTC).isoformat()}
    result |= {phase.name: summary(phase) for phase in phases}
    result["after"]["recovered_after_s"] = recovered_after_s(phases[1])
    result |= {"api_cpu_s": round(cpu_used, 1), "load_before": load_before, "load_after": load_after, "shed": shed}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--code", default=".", help="the directory whose tickwheel and api packages run the API")
    parser.add_argument("--label", default="")
    parser.add_argument("--over-rate", type=float, default=1000.0, help="creates/s offered while overloading")
    parser.add_argument("--over-s", type=float, default=40.0)
    parser.add_argument("--after-rate", type=float, default=50.0, help="creates/s offered after the overload")
    parser.add_argument("--after-s", type=float, default=40.0)
    parser.add_argument("--timeout-s", type=float, default=15.0, help="each request's timeout (the soak's: 15 s)")
    parser.add_argument("--connections", type=int, default=1000, help="the client's connection pool")
    parser.add_argument("--port", type=int, default=18096)
    parsed = parser.parse_args()
    parsed.code = str(Path(parsed.code).resolve())  # the API's working directory: its code
    asyncio.run(main(parsed))
