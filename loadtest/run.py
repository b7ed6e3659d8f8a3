"""Run a bounded, headless Locust load test against the running platform and keep its results.

    .venv/bin/python loadtest/run.py api --users 20 --time 60
    .venv/bin/python loadtest/run.py e2e --rate 20 --time 60 --ahead 5

Creates fresh tenants (`tickwheel tenants create`), runs Locust headless for `--time` seconds with `--processes`
worker processes, and writes everything to `loadtest/results/<mode>-<UTC stamp>/`: Locust's CSV files
(`locust_stats.csv`, ...), its JSON (`locust.json`), and for `e2e` the checker's report (`e2e-report.json`:
lost, duplicates, early, start lag p50/p99/max from the sink's clock). Exits non-zero on a lost or early run,
or when Locust reports failures.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import sys
import uuid
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from benchmarks.peers import harness  # noqa: E402
from benchmarks.peers.tickwheel_bench import create_tenant  # noqa: E402
from tickwheel.dev.checker import Call, Expected, Report, check  # noqa: E402
from tickwheel.dev.platform import local_settings  # noqa: E402
from tickwheel.dev.sink import Sink  # noqa: E402

LOCUSTFILES = {"api": "locustfile_api.py", "e2e": "locustfile_e2e.py"}
MAX_TIME_S = 600


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=sorted(LOCUSTFILES))
    p.add_argument("--time", type=int, default=60, help="seconds of load (default %(default)s, at most 600)")
    p.add_argument("--users", type=int, default=10, help="simulated users (default %(default)s)")
    p.add_argument("--processes", type=int, default=1, help="Locust processes (1-2 on a 2-core box)")
    p.add_argument("--tenants", type=int, default=4, help="fresh tenants the users spread over")
    p.add_argument("--rate", type=float, default=20.0, help="e2e: once-jobs scheduled per second in total")
    p.add_argument("--ahead", type=float, default=5.0, help="e2e: seconds between scheduling and due")
    p.add_argument("--drain", type=float, default=30.0, help="e2e: seconds to wait for the last runs")
    p.add_argument("--mix", default=None, help="api: operation weights, e.g. create=3,get=5,list=2,patch=1")
    p.add_argument("--api", default=None, help="API base URL (default from settings)")
    args = p.parse_args(argv)
    if not 1 <= args.time <= MAX_TIME_S:
        p.error(f"--time must be 1..{MAX_TIME_S} seconds")
    return args


async def make_tenants(count: int, out_dir: Path) -> dict[str, str]:
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    keys = {f"t{i}": await create_tenant(f"load-{stamp}-t{i}") for i in range(count)}
    (out_dir / "tenants.json").write_text(json.dumps(keys))
    return keys


def locust_command(args: argparse.Namespace, api_url: str, out_dir: Path) -> list[str]:
    return [
        sys.executable, "-m", "locust", "-f", str(REPO_ROOT / "loadtest" / LOCUSTFILES[args.mode]),
        "--headless", "--host", api_url, "-u", str(args.users), "-r", str(args.users), "-t", f"{args.time}s",
        "--processes", str(args.processes), "--stop-timeout", "5", "--only-summary",
        "--csv", str(out_dir / "locust"), "--json-file", str(out_dir / "locust"),
    ]  # fmt: skip


async def run_locust(args: argparse.Namespace, api_url: str, out_dir: Path, env: dict[str, str]) -> int:
    command = locust_command(args, api_url, out_dir)
    print("$", " ".join(command), flush=True)
    locust = await asyncio.create_subprocess_exec(*command, env={**os.environ, **env}, cwd=REPO_ROOT)
    try:
        return await asyncio.wait_for(locust.wait(), timeout=args.time + 60)
    except TimeoutError:
        locust.kill()  # our own child, by its handle
        await locust.wait()
        return 124


def read_expected(out_dir: Path) -> list[Expected]:
    expected = []
    for path in sorted(out_dir.glob("expected-*.jsonl")):
        for line in path.read_text().splitlines():
            doc = json.loads(line)
            expected.append(Expected(uuid.UUID(doc["run_id"]), doc["tenant"], datetime.fromisoformat(doc["due_at"])))
    return expected


async def e2e(args: argparse.Namespace, api_url: str, out_dir: Path, env: dict[str, str]) -> tuple[int, Report]:
    """Locust schedules through the API while this process's sink receives the calls; then check them."""
    async with Sink() as sink:
        env |= {"TW_SINK_URL": sink.base_url, "TW_E2E_AHEAD_S": str(args.ahead),
                "TW_E2E_RATE_PER_USER": str(args.rate / args.users)}  # fmt: skip
        code = await run_locust(args, api_url, out_dir, env)
        expected = read_expected(out_dir)
        last_due = max((e.due_at for e in expected), default=datetime.now(UTC))
        await harness.wait_delivered(sink, expected, last_due + timedelta(seconds=args.drain))
        calls = harness.to_checker_calls(sink.calls)
    write_calls(calls, out_dir)
    report = check(expected, calls, now=datetime.now(UTC))
    return code, report


def write_calls(calls: list[Call], out_dir: Path) -> None:
    """Every call the sink received, for a closer look at the lag distribution than p50/p99/max."""
    with (out_dir / "calls.jsonl").open("w") as out:
        for c in calls:
            doc = {
                "run_id": str(c.run_id),
                "tenant": c.tenant,
                "received_at": c.received_at.isoformat(),
                "status": c.status,
            }
            out.write(json.dumps(doc) + "\n")


def write_report(report: Report, out_dir: Path, args: argparse.Namespace) -> None:
    doc = asdict(report) | {"ok": report.ok, "summary": report.summary(), "args": vars(args)}
    doc["lost"] = [str(r) for r in report.lost]
    doc["early"] = [str(r) for r in report.early]
    doc["duplicates"] = {str(k): v for k, v in report.duplicates.items()}
    (out_dir / "e2e-report.json").write_text(json.dumps(doc, indent=2) + "\n")


def print_stats(out_dir: Path) -> None:
    """Locust's per-operation figures, one line each (the full table is in locust_stats.csv)."""
    path = out_dir / "locust_stats.csv"
    if not path.exists():
        return
    for row in csv.DictReader(path.open()):
        print(
            f"{row['Type'] or '':6} {row['Name']:12} requests {row['Request Count']:>6} failures "
            f"{row['Failure Count']:>5} {float(row['Requests/s']):7.1f}/s p50 {row['50%']} ms p99 {row['99%']} ms"
        )


async def main_async(args: argparse.Namespace) -> int:
    settings = local_settings()
    api_url = args.api or f"http://127.0.0.1:{settings.api.port}"
    out_dir = REPO_ROOT / "loadtest" / "results" / f"{args.mode}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    out_dir.mkdir(parents=True)
    await make_tenants(args.tenants, out_dir)
    env = {"TW_LOAD_DIR": str(out_dir), "PYTHONPATH": str(REPO_ROOT)}
    if args.mix:
        env["TW_LOAD_MIX"] = args.mix
    if args.mode == "api":
        code = await run_locust(args, api_url, out_dir, env)
    else:
        code, report = await e2e(args, api_url, out_dir, env)
        write_report(report, out_dir, args)
        print(f"e2e: {report.summary()}")
        code = code or (0 if not (report.lost or report.early) else 3)
    print_stats(out_dir)
    print(f"results: {out_dir}")
    return code


def main() -> int:
    return asyncio.run(main_async(parse_args()))


if __name__ == "__main__":
    sys.exit(main())
