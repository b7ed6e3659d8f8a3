"""Where a JVM server's CPU goes, per thread group, over a window (BENCHMARKS.md "Cost per run, round 5").

`snap` records every thread's user and system CPU and its voluntary and involuntary context switches from
/proc/<pid>/task; `diff` prints the groups (thread names without their numbers) between two snapshots, per run
when `--runs` is given. Cassandra's request stages share one pool of workers (SEPWorker) that rename themselves
after the stage they last served (Native-Transport-Requests-N, MutationStage-N, ReadStage-N; SharedPool-Worker-N
where `cassandra.set_sep_thread_name` is false, as on the dev stack), so their sum is printed as "SEP pool".
`jfr` buckets the execution samples of a JFR recording by what their stack contains
(`jfr print --json --stack-depth 64 --events jdk.ExecutionSample x.jfr > x.json`: the default depth of 5 hides
the stage); JFR samples only threads running Java code, so the pool's parking and waking (kernel time) is not in
it, while /proc counts it.

    .venv/bin/python -m benchmarks.jvm_profile snap <cassandra pid> /tmp/a.json
    ... 30 s of load at a known rate ...
    .venv/bin/python -m benchmarks.jvm_profile snap <cassandra pid> /tmp/b.json
    .venv/bin/python -m benchmarks.jvm_profile diff /tmp/a.json /tmp/b.json --runs 3000
    jcmd <pid> JFR.start duration=30s filename=/tmp/x.jfr settings=profile
    jfr print --json --stack-depth 64 --events jdk.ExecutionSample /tmp/x.jfr > /tmp/x.json
    .venv/bin/python -m benchmarks.jvm_profile jfr /tmp/x.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SEP_STAGES = (
    "Native-Transport-Requests", "MutationStage", "ReadStage", "CounterMutationStage", "ViewMutationStage",
    "SharedPool-Worker",  # their own name, kept when they do not rename themselves (cassandra.set_sep_thread_name)
)  # fmt: skip
# First match wins: a compaction's stack also holds reads and writes of cells.
JFR_BUCKETS = (
    ("compaction", ("CompactionTask", "CompactionManager", "CompactionExecutor")),
    ("memtable flush", ("FlushRunnable", "flushMemtable", "Flushing")),
    ("paxos (LWT)", ("service.paxos.", "StorageProxy.cas")),
    ("reads", ("SinglePartitionReadCommand", "ReadCommand", "StorageProxy.read")),
    ("writes", ("Mutation.apply", "Keyspace.apply", "StorageProxy.mutate", "BatchStatement", "CommitLog")),
    ("CQL and transport", ("cassandra.transport.", "cassandra.cql3.")),
    ("netty", ("io.netty.",)),
    ("SEP pool idle", ("SEPWorker", "SharedExecutorPool")),
)


@dataclass(frozen=True, slots=True)
class ThreadCpu:
    name: str
    user_s: float
    system_s: float
    voluntary: int
    involuntary: int


def snapshot(pid: int) -> dict[str, ThreadCpu]:
    """Every thread of `pid` now, by thread id."""
    found: dict[str, ThreadCpu] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:  # not running (a remote server, or it stopped)
        return found
    for tid in tids:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        switches = {k: int(v) for k, v in (line.split(":") for line in status.splitlines() if "ctxt_switches" in line)}
        found[tid] = ThreadCpu(
            stat[stat.index("(") + 1 : stat.rindex(")")],
            int(fields[11]) / CLOCK_TICKS,
            int(fields[12]) / CLOCK_TICKS,
            switches.get("voluntary_ctxt_switches", 0),
            switches.get("nonvoluntary_ctxt_switches", 0),
        )
    return found


def group_of(thread_name: str) -> str:
    """A thread's group: its name without the worker number (Linux keeps 15 characters of it)."""
    name = re.sub(r"[-:#]?\d+$", "", thread_name).rstrip("-: ") or thread_name
    return "SEP pool" if any(stage.startswith(name) or name.startswith(stage) for stage in SEP_STAGES) else name


def diff(before: dict[str, ThreadCpu], after: dict[str, ThreadCpu]) -> dict[str, list[float]]:
    """Per group: [user s, system s, voluntary, involuntary switches, threads] between two snapshots."""
    groups: dict[str, list[float]] = {}
    for tid, now in after.items():
        then = before.get(tid, ThreadCpu(now.name, 0.0, 0.0, 0, 0))
        row = groups.setdefault(group_of(now.name), [0.0, 0.0, 0, 0, 0])
        row[0] += now.user_s - then.user_s
        row[1] += now.system_s - then.system_s
        row[2] += now.voluntary - then.voluntary
        row[3] += now.involuntary - then.involuntary
        row[4] += 1
    return groups


def report(groups: dict[str, list[float]], runs: float | None, top: int = 15) -> list[str]:
    total = sum(u + s for u, s, *_ in groups.values())

    def per(seconds: float) -> str:
        return f" {1000 * seconds / runs:6.2f} ms/run" if runs else ""

    lines = [f"total {total:.2f} s (system {sum(s for _, s, *_ in groups.values()):.2f}){per(total)}"]
    for name, (u, s, vol, inv, n) in sorted(groups.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:top]:
        if u + s <= 0:
            continue
        switches = f" ({(vol + inv) / runs:.0f}/run)" if runs else ""
        lines.append(
            f"{name:28s} {int(n):4d} thr {u + s:7.2f} s (sys {s:5.2f}) {100 * (u + s) / total:5.1f} %{per(u + s)}"
            f"  switches {int(vol)}+{int(inv)}{switches}"
        )
    return lines


def jfr_buckets(recording_json: dict[str, Any]) -> collections.Counter[str]:
    """Execution samples per bucket of JFR_BUCKETS ("other" when none matches)."""
    counts: collections.Counter[str] = collections.Counter()
    for event in recording_json["recording"]["events"]:
        frames = (event["values"].get("stackTrace") or {}).get("frames") or []
        stack = "|".join(f["method"]["type"]["name"].replace("/", ".") + "." + f["method"]["name"] for f in frames)
        counts[next((b for b, keys in JFR_BUCKETS if any(k in stack for k in keys)), "other")] += 1
    return counts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("snap")
    s.add_argument("pid", type=int)
    s.add_argument("out", type=Path)
    d = sub.add_parser("diff")
    d.add_argument("before", type=Path)
    d.add_argument("after", type=Path)
    d.add_argument("--runs", type=float, help="runs (or requests) in the window: figures per run")
    j = sub.add_parser("jfr")
    j.add_argument("recording_json", type=Path)
    args = p.parse_args()
    if args.command == "snap":
        args.out.write_text(json.dumps({tid: list(vars_of(t)) for tid, t in snapshot(args.pid).items()}))
    elif args.command == "diff":
        print("\n".join(report(diff(load(args.before), load(args.after)), args.runs)))
    else:
        counts = jfr_buckets(json.loads(args.recording_json.read_text()))
        n = sum(counts.values())
        print(f"{n} execution samples")
        for bucket, k in counts.most_common():
            print(f"  {100 * k / n:5.1f} % {bucket}")


def load(path: Path) -> dict[str, ThreadCpu]:
    return {tid: ThreadCpu(*fields) for tid, fields in json.loads(path.read_text()).items()}


def vars_of(t: ThreadCpu) -> tuple[str, float, float, int, int]:
    return (t.name, t.user_s, t.system_s, t.voluntary, t.involuntary)


if __name__ == "__main__":
    main()
