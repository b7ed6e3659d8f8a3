"""The local stack's Cassandra command: the JVM is started with a timer slack (BENCHMARKS.md "Cost per run,
round 5": the request stages' spinning workers woke ~35 times per statement with Linux's default 50 us)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tickwheel.dev.stack import cassandra


def test_the_launcher_sets_the_slack_and_execs_the_command() -> None:
    out = subprocess.run(
        cassandra.with_timer_slack(["/bin/cat", "/proc/self/timerslack_ns"], 777_000),
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == "777000"  # the exec'd program runs with it (every thread it makes inherits it)


def test_the_cassandra_command_runs_the_jvm_through_the_launcher(tmp_path: Path) -> None:
    argv = cassandra.command(tmp_path)
    assert argv[:2] == [sys.executable, "-c"]
    assert argv[3] == str(cassandra.TIMER_SLACK_NS)
    assert argv[4].endswith("java")
    assert argv[-1] == "org.apache.cassandra.service.CassandraDaemon"
