"""A short nemesis soak (benchmarks/soak.py) on the test stack: two minutes of the steady mix (one-offs, minutely
crons, failing targets into the DLQ, Kafka targets) through two dispatchers and two workers while three process
faults happen one at a time. The server faults (a Cassandra, Kafka or ZooKeeper node, Redis) need the cluster
and would stop the servers every other test uses, so they are soaked by `benchmarks/soak.py` on
`tickwheel stack up --nodes 3` (BENCHMARKS.md, "Nemesis soak"), not here.

Nothing is asserted about speed (the lag figures are printed, and measured in BENCHMARKS.md): a killed worker's
call in flight is made again once its lease lapses, so the only timing here is the soak's drain. The soak waits for
every shard to be owned and read before the load, but not for its warm canary (no lag is asserted here, and the
test's five minutes have no room for it).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from benchmarks.soak import soak
from tickwheel.settings import Settings

STACK_DIR = Path(__file__).resolve().parents[2] / ".stack"
FAULTS = ["kill-dispatcher", "pause-dispatcher", "kill-worker"]


# Two minutes of load, a 75 s drain, the platform's start and the history's read-back: 282 s alone at load 7-13,
# past the suite's 300 s at load 28 (the drain's end, nothing wrong).
@pytest.mark.timeout(480)
async def test_a_short_soak_with_three_process_faults_loses_nothing(stack_settings: Settings) -> None:
    args = argparse.Namespace(
        stack_dir=STACK_DIR, minutes=2.0, seed=19, rate=2.0, faults=FAULTS, warmup_s=15.0, gap_s=3.0,
        settle_s=12.0, down_s=0.0, drain_s=75.0, out=None, canary_rounds=0, repeat=False,
    )  # fmt: skip
    rows = await soak(args, base=stack_settings)
    windows = {row.window: row for row in rows}
    assert len(rows) == len(FAULTS) + 2, list(windows)  # every fault had its window, then steady and overall
    overall = rows[-1]
    assert overall.report.expected > 100
    assert overall.report.lost == [] and overall.report.early == [], overall.row()
    assert overall.not_final == [], overall.row()
    assert overall.api_errors == 0, overall.row()  # no fault here touches the API or its servers
    # at-least-once: the worker killed mid-call leaves its call to be made again; nothing else repeats a call
    assert sum(overall.report.duplicates.values()) <= 3, overall.row()
