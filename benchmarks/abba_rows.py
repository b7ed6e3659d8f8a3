"""The markdown rows of `benchmarks/abba.sh` legs: one row per leg, its measured (not warm-up) step.

    .venv/bin/python -m benchmarks.abba_rows /tmp/abba/a1-*
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HEADER = (
    "| leg | code | delivered | lost / dup / early | create p50 | start lag p50 / p99 | api | dispatcher | worker "
    "| Cassandra (SEP pool) | Cassandra switches / run | Kafka | Redis | **whole box** | logged batches / create "
    "| load |\n| --- | --- | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
    "| --- |"
)
PLATFORM = ("api", "dispatcher", "worker", "coordinator")


def measured_step(leg: Path) -> dict[str, Any]:
    """The last step of the leg's newest sustained result that is not the warm-up."""
    results = sorted((leg / "code" / "benchmarks" / "results").glob("sustained-*.json"))
    if not results:
        raise SystemExit(f"{leg}: no sustained result")
    steps = [s for s in json.loads(results[-1].read_text()) if "result" in s and not s.get("warmup")]
    return steps[-1]


def row(leg: Path) -> str:
    """One leg's row."""
    step = measured_step(leg)
    result, per_run = step["result"], step["per_run"]
    cpu = per_run["cpu_ms"]
    whole = sum(cpu.values())
    cassandra = cpu.get("cassandra", 0.0)
    sep = per_run.get("cassandra_threads_ms", {}).get("SEP pool")
    creates = result["submitted"] or 1
    logged = step["delta"]["cql"].get("driver/batch_logged", 0) / creates
    lag = result["lag_s"]
    name = (leg / "leg").read_text().split()
    load = f"{step['loadavg_before'][0]:.1f}->{step['loadavg_after'][0]:.1f}"
    cells = [
        leg.name,
        f"{name[0]} `{name[1]}`",
        f"{result['delivered']:,}",
        f"{result['lost']} / {result['duplicate_calls']} / {result['early']}",
        f"{1000 * result['submit_s'].get('p50', 0):.0f} ms",
        f"{1000 * lag.get('p50', 0):.0f} ms / {lag.get('p99', 0):.3f} s",
        *(f"{cpu.get(p, 0):.2f}" for p in ("api", "dispatcher", "worker")),
        f"{cassandra:.2f} ({sep:.2f})" if sep is not None else f"{cassandra:.2f}",
        f"{per_run.get('cassandra_switches', 0):.1f}",
        f"{cpu.get('kafka', 0):.2f}",
        f"{cpu.get('redis', 0):.2f}",
        f"**{whole:.2f}**",
        f"{logged:.2f}",
        load,
    ]
    return "| " + " | ".join(cells) + " |"


def main() -> int:
    print(HEADER)
    for arg in sys.argv[1:]:
        print(row(Path(arg)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
