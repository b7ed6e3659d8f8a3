"""One side-by-side run: the same workload through each system in turn, one JSON file, one Markdown table.

    .venv/bin/python -m benchmarks.peers.compare --runs 2000 --window 60 --systems tickwheel,celery,apscheduler,arq

Ratios are each system's figure over the first system's (so the first reads 1.00); on a shared, noisy box only
ratios from one run are comparable.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable

from benchmarks.peers import harness
from benchmarks.peers.harness import BenchResult, System


def _factories() -> dict[str, Callable[[argparse.Namespace], System]]:
    from benchmarks.peers import apscheduler_bench, celery_bench, tickwheel_bench

    return {
        "tickwheel": tickwheel_bench.make,
        "celery": lambda args: celery_bench.CelerySystem(args.concurrency),
        "apscheduler": lambda args: apscheduler_bench.APSchedulerSystem(args.concurrency),
        "arq": _arq,
    }


def _arq(args: argparse.Namespace) -> System:
    """arq pins redis<6, so it lives in a venv of its own (pyproject.toml): imported only when it runs."""
    from benchmarks.peers import arq_bench

    return arq_bench.ArqSystem(args.max_jobs)


def markdown(results: list[BenchResult]) -> str:
    """The figures and, in brackets, the ratio to the first system."""
    base = results[0]
    rows = [
        "| system | delivered | lost | duplicates | runs/s | lag p50 | lag p99 | lag max | submit p99 | CPU ms/run |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        rows.append(
            f"| {r.system} | {r.delivered}/{r.submitted} | {r.lost} | {r.duplicate_calls} "
            f"| {r.runs_per_s:.1f} ({_ratio(r.runs_per_s, base.runs_per_s)}) "
            f"| {_ms(r.lag_s, 'p50')} ({_ratio(r.lag_s.get('p50'), base.lag_s.get('p50'))}) "
            f"| {_ms(r.lag_s, 'p99')} ({_ratio(r.lag_s.get('p99'), base.lag_s.get('p99'))}) "
            f"| {_ms(r.lag_s, 'max')} "
            f"| {_ms(r.submit_s, 'p99')} ({_ratio(r.submit_s.get('p99'), base.submit_s.get('p99'))}) "
            f"| {r.cpu_ms_per_run:.2f} ({_ratio(r.cpu_ms_per_run, base.cpu_ms_per_run)}) |"
        )
    return "\n".join(rows)


def _ms(figures: dict[str, float], key: str) -> str:
    return f"{figures[key] * 1000:.0f} ms" if key in figures else "n/a"


def _ratio(value: float | None, base: float | None) -> str:
    return f"x{value / base:.2f}" if value is not None and base else "n/a"


async def compare(names: list[str], args: argparse.Namespace) -> list[BenchResult]:
    factories = _factories()
    workload = harness.workload_of(args)
    results = []
    for name in names:
        result = await harness.run_benchmark(factories[name](args), workload)
        print(result.line(), flush=True)
        results.append(result)
    return results


def main() -> int:
    p = harness.parser(__doc__ or "")
    p.add_argument("--systems", default="tickwheel,celery,apscheduler", help="comma-separated, first is the base")
    p.add_argument("--concurrency", type=int, default=32, help="peer worker threads (and tickwheel submissions / 2)")
    p.add_argument("--api", default=None, help="tickwheel API base URL")
    p.add_argument("--max-jobs", type=int, default=256, help="arq's calls in flight")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    names = [n.strip() for n in args.systems.split(",") if n.strip()]
    unknown = set(names) - set(_factories())
    if unknown:
        p.error(f"unknown systems: {', '.join(sorted(unknown))}")
    results = asyncio.run(compare(names, args))
    print(markdown(results))
    print(f"results: {harness.write_results(results, args.json)}")
    return 0 if all(r.lost == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
