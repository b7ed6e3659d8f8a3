"""The local stack's Cassandra command: the JVM is started with a timer slack (BENCHMARKS.md "Cost per run,
round 5": the request stages' spinning workers woke ~35 times per statement with Linux's default 50 us)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml as yaml_parser

from tickwheel.dev.stack import cassandra
from tickwheel.settings import build


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


def test_a_stack_node_purges_paxos_state_by_gc_grace_and_its_clients_shorten_that_grace(tmp_path: Path) -> None:
    node = cassandra.node_spec(["127.0.0.1", "127.0.0.2", "127.0.0.3"], 1)
    for name, yaml in (("cassandra", cassandra._YAML), (node.name, node.prepare.keywords["yaml"])):  # type: ignore[attr-defined]
        conf = tmp_path / name / "conf"
        conf.mkdir(parents=True)
        (conf / "cassandra.yaml").write_text(yaml)
    settings = cassandra.client_settings(tmp_path, ["cassandra", node.name])
    assert build(settings).cassandra.lwt_gc_grace_s == cassandra.PAXOS_STATE_S
    # longer than three rounds of Cassandra's Paxos auto repair (every 5 minutes), which completes what a
    # coordinator left uncommitted before its state may be purged
    assert cassandra.PAXOS_STATE_S >= 3 * 300


def test_a_node_still_on_legacy_purging_gives_its_clients_no_grace(tmp_path: Path) -> None:
    conf = tmp_path / "cassandra" / "conf"
    conf.mkdir(parents=True)
    (conf / "cassandra.yaml").write_text(cassandra._YAML.replace("paxos_state_purging: gc_grace\n", ""))
    assert cassandra.client_settings(tmp_path, ["cassandra"]) == {}  # started by an older checkout: untouched
    assert cassandra.client_settings(tmp_path, ["cassandra-2"]) == {}  # never prepared


def test_server_names_finds_the_default_stacks_server_and_every_node_of_one_started_with_hosts(tmp_path: Path) -> None:
    """The benchmarks' CPU probes find `cassandra` on the default stack and `cassandra-1`.. on one with --hosts."""
    from tickwheel.dev.stack.process import server_names

    single, nodes = tmp_path / "single", tmp_path / "nodes"
    (single / "cassandra").mkdir(parents=True)
    for name in ("cassandra-1", "cassandra-2", "cassandra-10", "cassandra-x", "kafka-1"):
        (nodes / name).mkdir(parents=True)
    assert server_names(single, "cassandra") == ["cassandra"]
    assert server_names(nodes, "cassandra") == ["cassandra-1", "cassandra-2", "cassandra-10"]
    assert server_names(nodes, "zookeeper") == []


def test_every_stack_node_keeps_its_memtables_in_tries_with_their_cells_off_the_heap() -> None:
    """Fewer, larger flushes: each flush of `system.paxos` is merged with all the Paxos state the node keeps
    (BENCHMARKS.md "Cassandra's compaction and GC per run"), and the cells of every memtable leave the heap."""
    node = cassandra.node_spec(["127.0.0.4"], 0)
    for text in (cassandra._YAML, node.prepare.keywords["yaml"]):  # type: ignore[attr-defined]
        conf = yaml_parser.safe_load(text)
        memtables = conf["memtable"]["configurations"]
        assert memtables["trie"] == {"class_name": "TrieMemtable"}
        assert memtables["default"] == {"inherits": "trie"}  # every table's, the system keyspace's too
        assert conf["memtable_allocation_type"] == "offheap_objects"
        # more room off the heap than the heap's share (3/8 of the cluster node's 640 MiB heap: 240 MiB)
        assert conf["memtable_offheap_space"] == f"{cassandra.MEMTABLE_OFFHEAP_MIB}MiB"
        assert cassandra.MEMTABLE_OFFHEAP_MIB >= 2 * 240
        # flushed at half of 3/8 of the heap: 2.25x Cassandra's defaults' flushes (a third of a quarter)
        assert conf["memtable_flush_writers"] == 1
        # what the writes' durability rests on is as it was: the commit log, synced every 10 s
        assert (conf["commitlog_sync"], conf["commitlog_sync_period"]) == ("periodic", "10000ms")
    one_of_three = cassandra.node_spec(["a", "b", "c"], 0)
    single = yaml_parser.safe_load(cassandra._YAML)["memtable_heap_space"]
    clustered = yaml_parser.safe_load(one_of_three.prepare.keywords["yaml"])  # type: ignore[attr-defined]
    assert (single, clustered["memtable_heap_space"]) == ("384MiB", "240MiB")  # 3/8 of the 1 GiB and 640 MiB heaps
    assert one_of_three.command.keywords["heap"] == "640m"  # type: ignore[attr-defined]


def test_every_stack_node_runs_as_many_requests_at_once_as_two_cores_can() -> None:
    """Work permits past what runs in parallel wake more request-stage workers per statement (BENCHMARKS.md "The
    driver's request path", set c2: 0.81x the node's context switches per run)."""
    node = cassandra.node_spec(["127.0.0.4"], 0)
    for text in (cassandra._YAML, node.prepare.keywords["yaml"]):  # type: ignore[attr-defined]
        conf = yaml_parser.safe_load(text)
        concurrency = [conf[k] for k in ("concurrent_reads", "concurrent_writes", "concurrent_counter_writes")]
        assert concurrency == [8, 8, 8] and conf["native_transport_max_threads"] == 16


def test_every_stack_node_spreads_its_merges_and_empties_its_old_generation_concurrently(tmp_path: Path) -> None:
    """A merge of system.paxos unthrottled took a core for seconds, and the throughput collector stopped the node
    for each old-generation collection: the start lag's worst windows (BENCHMARKS.md "G1 and the compaction
    throttle")."""
    node = cassandra.node_spec(["127.0.0.4"], 0)
    for text in (cassandra._YAML, node.prepare.keywords["yaml"]):  # type: ignore[attr-defined]
        assert yaml_parser.safe_load(text)["compaction_throughput"] == "8MiB/s"
    argv = cassandra.command(tmp_path)
    assert "-XX:+UseG1GC" in argv and "-XX:+UseTransparentHugePages" in argv
    assert not any(flag in argv for flag in ("-XX:+UseParallelGC", "-XX:+UseSerialGC"))
