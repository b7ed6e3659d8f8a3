"""The three-node cluster (`tickwheel stack up --nodes 3`): every node starts, answers and sees its peers, the env
file gives clients every node and the replicated settings, and `down` stops them all.

One test, because a cluster takes minutes to start on a 2-core box. It runs on loopback addresses no developer's
cluster uses (127.0.3.1-3) in a temporary directory, so it never touches `.stack/` or `.stack-cluster/`.
"""

from __future__ import annotations

from pathlib import Path

from tickwheel.dev import stack
from tickwheel.dev.stack import process
from tickwheel.settings import Settings, host_port

HOSTS = ("127.0.3.1", "127.0.3.2", "127.0.3.3")


def test_a_three_node_cluster_starts_answers_on_every_node_and_stops(tmp_path: Path) -> None:
    try:
        stack.up(tmp_path, cluster=HOSTS, progress=print)
        rows = {row.name: row for row in stack.status(tmp_path)}
        assert set(rows) == {
            *(f"{kind}-{i}" for kind in ("cassandra", "kafka", "zookeeper") for i in (1, 2, 3)),
            "redis",
        }
        assert all(row.healthy and row.pid is not None for row in rows.values()), rows
        for i in (1, 2, 3):
            assert rows[f"cassandra-{i}"].detail.endswith("3 nodes in its ring"), rows[f"cassandra-{i}"]
            assert rows[f"kafka-{i}"].detail.startswith("3 broker(s)"), rows[f"kafka-{i}"]
            assert rows[f"cassandra-{i}"].endpoint.startswith(f"{HOSTS[i - 1]}:")

        settings = Settings.from_env({}, env_file=tmp_path / "env")
        assert [host_port(h, 0)[0] for h in settings.cassandra.hosts] == list(HOSTS)
        assert [host_port(h, 0)[0] for h in settings.kafka.bootstrap.split(",")] == list(HOSTS)
        assert [host_port(h, 0)[0] for h in settings.zookeeper.hosts.split(",")] == list(HOSTS)
        assert "'replication_factor': 3" in settings.cassandra.replication
        assert (settings.cassandra.consistency, settings.kafka.replication_factor) == ("QUORUM", 3)

        # The nemesis's primitives: one node stops while its peers keep answering, then comes back.
        assert stack.stop_server(tmp_path, "kafka-2")
        after = {row.name: row for row in stack.status(tmp_path)}
        assert not after["kafka-2"].healthy
        assert after["kafka-1"].healthy and after["kafka-3"].healthy, after
        stack.start_server(tmp_path, "kafka-2", progress=print)
        assert stack.wait_ready("kafka-2", rows["kafka-2"].endpoint, timeout_s=60).startswith("3 broker(s)")
    finally:
        stopped = stack.down(tmp_path, progress=print)
    assert len(stopped) == 10
    assert all(process.read_pid(tmp_path, name) is None for name in stack.specs_of(tmp_path))
    for row in rows.values():
        host, port = host_port(row.endpoint, 0)
        assert not process.port_open(host, port, timeout_s=0.5), row
