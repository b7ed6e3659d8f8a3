"""benchmarks.sustained: a step's difference of counters carries Cassandra's CPU per thread group."""

from __future__ import annotations

from benchmarks.jvm_profile import ThreadCpu
from benchmarks.sustained import Snapshot, per_run


def test_the_difference_groups_cassandras_threads_and_per_run_reports_them() -> None:
    before = Snapshot({"cassandra": 10.0}, {}, {}, {"1": ThreadCpu("MutationStage-1", 1.0, 1.0, 100, 10)})
    after = Snapshot(
        {"cassandra": 14.0},
        {},
        {},
        {
            "1": ThreadCpu("Native-Transpor", 2.0, 2.0, 1100, 10),  # the SEP worker, renamed by its last stage
            "2": ThreadCpu("CompactionExecu", 1.5, 0.5, 0, 90),
        },
    )
    delta = after.minus(before)
    assert delta.cassandra_threads == {"SEP pool": [2.0, 1000], "CompactionExecu": [2.0, 90]}
    figures = per_run(delta, 1000)
    assert figures["cpu_ms"] == {"cassandra": 4.0}
    assert figures["cassandra_threads_ms"] == {"SEP pool": 2.0, "CompactionExecu": 2.0}
    assert figures["cassandra_switches"] == 1.1
