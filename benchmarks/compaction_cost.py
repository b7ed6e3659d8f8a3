"""What a Cassandra node spends beside the requests, per delivered run, as the node ages under a steady load
(BENCHMARKS.md "Cassandra's compaction and GC per run"): compaction, memtable flushes, the collector and the JIT,
from its threads' CPU (/proc), with what compaction read and wrote per table (`system.compaction_history`) and
what each memtable flush held (the node's log).

`sample` polls several nodes at once (nodes of the same age under the same load, side by side) every `--every`
seconds and appends one JSON line per node and poll; `report` prints each node's figures per window between two
polls (or over `--first`..`--last`); `log` sums a node's log (flushes and compactions per table) over a time range.
The runs are the node's local writes of `run_attempts` (one per delivered run, `system_views.local_write_latency`).

    .venv/bin/python -m benchmarks.compaction_cost sample --every 60 --count 11 --out /tmp/set1.jsonl \\
        A=127.0.0.4:29042,<pid>,<keyspace>,<node dir> B=127.0.0.5:29042,<pid>,<keyspace>,<node dir>
    .venv/bin/python -m benchmarks.compaction_cost report /tmp/set1.jsonl [--first 1] [--last 10]
    .venv/bin/python -m benchmarks.compaction_cost log <node dir>/cassandra-1.log [--since 18:06:00] [--until ...]
"""

from __future__ import annotations

import argparse
import calendar
import collections
import itertools
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.jvm_profile import CLOCK_TICKS, SEP_STAGES, snapshot

# Thread name prefixes (Linux keeps 15 characters) by what the thread does; first match wins, the rest is "other".
CATEGORIES = (
    ("compaction", ("CompactionExec",)),
    ("flush", ("MemtableFlush", "PerDiskMemtable", "MemtablePostFl", "MemtableReclai", "SlabPoolClean",
               "NativePoolClea", "MemtableCleane")),
    ("gc", ("GC Thread", "G1 ", "VM Thread")),
    ("jit", ("C2 Compiler", "C1 Compiler")),
    ("requests", (*(stage[:14] for stage in SEP_STAGES), "epollEventLoop")),
)  # fmt: skip


def category_of(thread_name: str) -> str:
    """compaction, flush, gc, jit, requests (the request stages' pool and netty) or other."""
    return next((c for c, prefixes in CATEGORIES if thread_name.startswith(prefixes)), "other")


def process_cpu_s(pid: int) -> float:
    """User + system CPU of the whole process (threads that ended included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


@dataclass(frozen=True, slots=True)
class Node:
    """One node to sample: `name=host:port,pid,keyspace,node dir`."""

    name: str
    endpoint: str
    pid: int
    keyspace: str
    home: Path

    @classmethod
    def parse(cls, text: str) -> Node:
        name, rest = text.split("=", 1)
        endpoint, pid, keyspace, home = rest.split(",")
        return cls(name, endpoint, int(pid), keyspace, Path(home))


def sstables(home: Path, keyspace: str) -> dict[str, list[int]]:
    """[sstables, bytes of their Data.db] per table of `keyspace`, and of system.paxos and system.batches."""
    found: dict[str, list[int]] = {}
    data = home / "data" / "data"
    dirs = [*(data / keyspace).glob("*-*"), *(data / "system").glob("paxos-*"), *(data / "system").glob("batches-*")]
    for table_dir in dirs:
        table = f"{table_dir.parent.name}.{table_dir.name.rsplit('-', 1)[0]}"
        files = list(table_dir.glob("*-Data.db"))
        found[table] = [len(files), sum(f.stat().st_size for f in files)]
    return found


class Probe:
    """A node's CQL session for the figures it keeps about itself."""

    def __init__(self, node: Node) -> None:
        from cassandra.cluster import Cluster  # deferred: the driver is slow to import
        from cassandra.policies import WhiteListRoundRobinPolicy

        host, port = node.endpoint.rsplit(":", 1)
        self.node = node
        self.cluster = Cluster([host], port=int(port), load_balancing_policy=WhiteListRoundRobinPolicy([host]))
        self.session = self.cluster.connect()

    def runs(self) -> int | None:
        rows = list(
            self.session.execute(
                'SELECT "count" FROM system_views.local_write_latency WHERE keyspace_name = %s AND table_name = %s',
                (self.node.keyspace, "run_attempts"),
            )
        )
        return int(rows[0][0]) if rows else None  # a row is a named tuple: .count is tuple.count

    def compactions(self, since_ms: int) -> dict[str, list[int]]:
        """[compactions, bytes in, bytes out] per table, of the compactions finished since `since_ms`."""
        found: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0])
        for row in self.session.execute(
            "SELECT keyspace_name, columnfamily_name, bytes_in, bytes_out, compacted_at FROM system.compaction_history"
        ):
            if row.compacted_at is not None and calendar.timegm(row.compacted_at.utctimetuple()) * 1000 >= since_ms:
                entry = found[f"{row.keyspace_name}.{row.columnfamily_name}"]
                entry[0] += 1
                entry[1] += row.bytes_in or 0
                entry[2] += row.bytes_out or 0
        return dict(found)

    def poll(self, since_ms: int) -> dict[str, Any]:
        groups: dict[str, float] = collections.defaultdict(float)
        for thread in snapshot(self.node.pid).values():
            groups[category_of(thread.name)] += thread.user_s + thread.system_s
        return {
            "node": self.node.name,
            "t": time.time(),
            "cpu_s": process_cpu_s(self.node.pid),
            "threads_s": dict(groups),
            "runs": self.runs(),
            "compactions": self.compactions(since_ms),
            "sstables": sstables(self.node.home, self.node.keyspace),
            "loadavg": Path("/proc/loadavg").read_text().split()[:3],
        }


def sample(nodes: list[Node], every_s: float, count: int, out: Path) -> None:
    """`count` + 1 polls of every node, `every_s` apart, appended to `out` as JSON lines."""
    probes = [Probe(node) for node in nodes]
    since_ms = int(time.time() * 1000)
    start = time.monotonic()
    with out.open("a") as f:
        for i in range(count + 1):
            for probe in probes:
                f.write(json.dumps({"poll": i, **probe.poll(since_ms)}) + "\n")
            f.flush()
            if i < count:
                time.sleep(max(0.0, start + (i + 1) * every_s - time.monotonic()))
    for probe in probes:
        probe.cluster.shutdown()


def window(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """One node's figures between polls `a` and `b`: CPU ms per run by category, compaction KB per run."""
    runs = (b["runs"] or 0) - (a["runs"] or 0)
    per = 1000 / runs if runs > 0 else float("nan")
    ms = {k: round((b["threads_s"].get(k, 0) - a["threads_s"].get(k, 0)) * per, 3) for k in b["threads_s"]}
    read = {t: b["compactions"].get(t, [0, 0, 0])[1] - a["compactions"].get(t, [0, 0, 0])[1] for t in b["compactions"]}
    paxos = read.get("system.paxos", 0)
    return {
        "node": b["node"],
        "seconds": round(b["t"] - a["t"]),
        "runs": runs,
        "runs_per_s": round(runs / (b["t"] - a["t"]), 1),
        "cassandra_ms": round((b["cpu_s"] - a["cpu_s"]) * per, 3),
        **{f"{k}_ms": v for k, v in sorted(ms.items())},
        "compacted_kb": round(sum(read.values()) * per / 1000 / 1024, 2),
        "paxos_compacted_kb": round(paxos * per / 1000 / 1024, 2),
        "paxos_on_disk_mib": round(b["sstables"].get("system.paxos", [0, 0])[1] / 2**20, 1),
        "load": f"{a['loadavg'][0]}->{b['loadavg'][0]}",
    }


def report(path: Path, first: int | None, last: int | None) -> list[dict[str, Any]]:
    """Each node's windows between consecutive polls, or the one window `first`..`last` (poll numbers)."""
    polls: dict[str, dict[int, dict[str, Any]]] = collections.defaultdict(dict)
    for line in path.read_text().splitlines():
        record = json.loads(line)
        polls[record["node"]][record["poll"]] = record
    rows = []
    for by_poll in polls.values():
        numbers = sorted(by_poll)
        if first is not None or last is not None:
            pairs = [(first if first is not None else numbers[0], last if last is not None else numbers[-1])]
        else:
            pairs = list(itertools.pairwise(numbers))
        rows += [window(by_poll[i], by_poll[j]) for i, j in pairs]
    return rows


UNITS = {"B": 1 / 2**20, "KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0}
ENQUEUED = re.compile(
    r"Enqueuing flush of (\S+), Reason: (\w+), Usage: (\S+) \(\d+%\) on-heap, (\S+) \(\d+%\) off-heap"
)
WRITING = re.compile(r"Writing Memtable-(\S+?)@\d+\((\S+) serialized bytes, (\d+) ops")
COMPACTED = re.compile(r"Compacted \(\S+\) (\d+) sstables to \[\S+/data/data/(\w+)/(\w+)-\w+/.*?\]"
                       r" to level=(\d+)\.\s+(\S+) to (\S+) .*? in ([\d,]+)ms")  # fmt: skip


def mib(size: str) -> float:
    """'4.232MiB' -> 4.232; '0B' -> 0."""
    match = re.fullmatch(r"([\d.,]+)(B|KiB|MiB|GiB)", size)
    return float(match[1].replace(",", "")) * UNITS[match[2]] if match else 0.0


def log_summary(path: Path, since: str = "", until: str = "~") -> dict[str, dict[str, float]]:
    """Per table (by its memtable's or sstables' name): flushes (and why), their heap / off-heap / serialized MiB,
    compactions, MiB read and written and their wall seconds, from a node's log between two `HH:MM:SS` times."""
    tables: dict[str, dict[str, float]] = collections.defaultdict(lambda: collections.defaultdict(float))
    for line in path.read_text(errors="replace").splitlines():
        stamp = line.split("] ", 1)[1][11:19] if "] " in line else ""
        if not since <= stamp <= until:
            continue
        if m := ENQUEUED.search(line):
            row = tables[m[1].split(".", 1)[1]]
            row["flushes"] += 1
            row[f"flushes_{m[2].lower()}"] += 1
            row["flushed_heap_mib"] += mib(m[3])
            row["flushed_offheap_mib"] += mib(m[4])
        elif m := WRITING.search(line):
            tables[m[1]]["flushed_serialized_mib"] += mib(m[2])
        elif m := COMPACTED.search(line):
            row = tables[m[3]]
            row["compactions"] += 1
            row["compacted_in_mib"] += mib(m[5])
            row["compacted_out_mib"] += mib(m[6])
            row["compaction_wall_s"] += int(m[7].replace(",", "")) / 1000
    return {table: {k: round(v, 2) for k, v in row.items()} for table, row in tables.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sample")
    s.add_argument("nodes", nargs="+", type=Node.parse, help="name=host:port,pid,keyspace,node dir")
    s.add_argument("--every", type=float, default=60.0)
    s.add_argument("--count", type=int, default=10)
    s.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("report")
    r.add_argument("jsonl", type=Path)
    r.add_argument("--first", type=int)
    r.add_argument("--last", type=int)
    g = sub.add_parser("log")
    g.add_argument("path", type=Path)
    g.add_argument("--since", default="")
    g.add_argument("--until", default="~")
    args = p.parse_args()
    if args.command == "sample":
        sample(args.nodes, args.every, args.count, args.out)
    elif args.command == "report":
        for row in report(args.jsonl, args.first, args.last):
            print(json.dumps(row))
    else:
        for table, row in sorted(log_summary(args.path, args.since, args.until).items()):
            print(json.dumps({"table": table, **row}))


if __name__ == "__main__":
    main()
