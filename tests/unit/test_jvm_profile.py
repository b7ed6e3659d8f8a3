"""benchmarks.jvm_profile: thread groups of a JVM server, their CPU between two snapshots, JFR buckets."""

from __future__ import annotations

import os

from benchmarks import jvm_profile
from benchmarks.jvm_profile import ThreadCpu


def test_the_request_stages_are_one_pool_whatever_stage_a_worker_last_served() -> None:
    # Linux keeps 15 characters of a thread's name: "Native-Transport-Requests-12" reads "Native-Transpor"
    assert jvm_profile.group_of("Native-Transpor") == "SEP pool"
    assert jvm_profile.group_of("MutationStage-41") == "SEP pool"
    assert jvm_profile.group_of("ReadStage-3") == "SEP pool"
    assert jvm_profile.group_of("CompactionExecu") == "CompactionExecu"
    assert jvm_profile.group_of("GC Thread#1") == "GC Thread"


def test_the_difference_counts_a_thread_born_in_the_window_from_zero() -> None:
    before = {"1": ThreadCpu("MutationStage-1", 1.0, 0.5, 10, 1)}
    after = {
        "1": ThreadCpu("Native-Transpor", 2.0, 1.0, 30, 2),  # the same worker, renamed by the stage it served
        "2": ThreadCpu("ReadStage-2", 0.5, 0.5, 5, 0),
        "3": ThreadCpu("CompactionExecu", 3.0, 0.0, 1, 9),
    }
    groups = jvm_profile.diff(before, after)
    assert groups["SEP pool"] == [1.5, 1.0, 25, 1, 2]
    assert groups["CompactionExecu"] == [3.0, 0.0, 1, 9, 1]
    lines = jvm_profile.report(groups, runs=1000)
    assert lines[0].startswith("total 5.50 s (system 1.00)") and "5.50 ms/run" in lines[0]
    assert lines[1].startswith("CompactionExecu")


def test_a_snapshot_of_this_process_has_its_threads() -> None:
    found = jvm_profile.snapshot(os.getpid())
    assert str(os.getpid()) in found
    assert all(t.user_s >= 0 and t.voluntary >= 0 for t in found.values())


def frame(cls: str, method: str) -> dict[str, object]:
    return {"method": {"type": {"name": cls}, "name": method}}


def test_jfr_samples_go_to_the_first_bucket_their_stack_matches() -> None:
    def event(*frames: dict[str, object]) -> dict[str, object]:
        return {"values": {"stackTrace": {"frames": list(frames)}}}

    db = "org/apache/cassandra/db/"
    compaction = event(frame(db + "Mutation", "apply"), frame(db + "compaction/CompactionTask", "run"))
    paxos = event(frame(db + "Keyspace", "apply"), frame("org/apache/cassandra/service/paxos/PaxosPropose", "run"))
    write = event(frame(db + "Keyspace", "apply"))
    recording = {"recording": {"events": [compaction, paxos, write, event(frame("java/lang/Object", "wait"))]}}
    assert jvm_profile.jfr_buckets(recording) == {"compaction": 1, "paxos (LWT)": 1, "writes": 1, "other": 1}
