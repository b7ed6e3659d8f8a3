"""benchmarks.compaction_cost: a Cassandra node's threads by what they do, its log's flushes and compactions per
table, and the figures per run between two polls."""

from __future__ import annotations

from pathlib import Path

from benchmarks import compaction_cost

LOG = """\
INFO  [SlabPoolCleaner] 2026-12-02 13:35:06,414 ColumnFamilyStore - Enqueuing flush of system.paxos, Reason: \
MEMTABLE_LIMIT, Usage: 16.556MiB (10%) on-heap, 512KiB (0%) off-heap
INFO  [PerDiskMemtableFlushWriter_0:1] 2026-12-02 13:35:07,073 Flushing - Writing Memtable-paxos@122309737(4.232MiB \
serialized bytes, 37014 ops, 16.556MiB (10%) on-heap, 0B (0%) off-heap), flushed range = [min(-1), max(1))
INFO  [CompactionExecutor:2] 2026-12-02 13:35:22,486 CompactionTask - Compacted (365bc210-ee55-11f1-9125-052a4e19933f) \
2 sstables to [/s/cassandra-1/data/data/system/paxos-b7b7f0c2fd0a34108c053ef614bb7c2d/oa-3-big,] to level=0.  \
2.146MiB to 2.159MiB (~100% of original) in 4,760ms.  Read Throughput = 461.551KiB/s, Write Throughput = 464.460KiB/s
INFO  [CompactionExecutor:2] 2026-12-02 13:50:00,000 CompactionTask - Compacted (465bc210-ee55-11f1-9125-052a4e19933f) \
4 sstables to [/s/cassandra-1/data/data/tw_a/runs-fdcfbeb0ee5511f19125052a4e19933f/oa-9-big,] to level=0.  \
1GiB to 1,000MiB (~98% of original) in 9,000ms.  Read Throughput = 1MiB/s
"""


def test_threads_are_counted_by_what_they_do_under_the_15_characters_linux_keeps() -> None:
    assert compaction_cost.category_of("CompactionExecu") == "compaction"
    assert compaction_cost.category_of("PerDiskMemtable") == "flush"
    assert compaction_cost.category_of("NativePoolClean") == "flush"
    assert compaction_cost.category_of("GC Thread#1") == "gc"
    assert compaction_cost.category_of("G1 Refine#0") == "gc"
    assert compaction_cost.category_of("C2 CompilerThre") == "jit"
    assert compaction_cost.category_of("Native-Transpor") == "requests"
    assert compaction_cost.category_of("MutationStage-4") == "requests"
    assert compaction_cost.category_of("ScheduledTasks:") == "other"


def test_the_log_gives_each_tables_flushes_and_compactions_inside_the_range(tmp_path: Path) -> None:
    log = tmp_path / "cassandra-1.log"
    log.write_text(LOG)
    tables = compaction_cost.log_summary(log, since="13:35:00", until="13:40:00")
    assert tables == {
        "paxos": {
            "flushes": 1.0,
            "flushes_memtable_limit": 1.0,
            "flushed_heap_mib": 16.56,
            "flushed_offheap_mib": 0.5,
            "flushed_serialized_mib": 4.23,
            "compactions": 1.0,
            "compacted_in_mib": 2.15,
            "compacted_out_mib": 2.16,
            "compaction_wall_s": 4.76,
        }
    }  # the compaction of `runs` at 13:50 is outside
    assert compaction_cost.log_summary(log)["runs"]["compacted_in_mib"] == 1024.0


def test_a_window_gives_cpu_and_compacted_bytes_per_run() -> None:
    def poll(t: float, cpu: float, compaction: float, runs: int, paxos_in: int) -> dict[str, object]:
        return {
            "node": "A", "t": t, "cpu_s": cpu, "threads_s": {"compaction": compaction, "gc": 1.0}, "runs": runs,
            "compactions": {"system.paxos": [3, paxos_in, paxos_in]}, "sstables": {"system.paxos": [1, 2**20]},
            "loadavg": ["1.0", "1.0", "1.0"],
        }  # fmt: skip

    row = compaction_cost.window(poll(0, 10.0, 1.0, 1000, 0), poll(60, 16.0, 2.0, 7000, 6000 * 4096))
    assert row["runs"] == 6000 and row["runs_per_s"] == 100.0
    assert row["cassandra_ms"] == 1.0 and row["compaction_ms"] == round(1000 / 6000, 3) and row["gc_ms"] == 0.0
    assert row["compacted_kb"] == row["paxos_compacted_kb"] == 4.0
    assert row["paxos_on_disk_mib"] == 1.0
