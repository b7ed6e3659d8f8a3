"""The local stack: real single-node Cassandra, Kafka, ZooKeeper and Redis on 127.0.0.1, under `.stack/`, or a
three-node cluster of them (`up(dir, cluster=hosts)`, `tickwheel stack up --nodes 3`).

`tickwheel stack up | down | status | logs` (see `add_stack_commands`); `up`, `down` and `status` for code;
`start_server` / `stop_server` / `wait_ready` for tests that stop and restart a server.
"""

from tickwheel.dev.stack.commands import add_stack_commands, stack_dir
from tickwheel.dev.stack.lifecycle import (
    CLUSTER_HOSTS,
    SPECS,
    ServerStatus,
    cluster_hosts,
    down,
    endpoint_overrides,
    endpoints,
    kind_of,
    specs_of,
    start_server,
    status,
    stop_server,
    up,
    wait_ready,
)
from tickwheel.dev.stack.process import StackError

__all__ = [
    "CLUSTER_HOSTS",
    "SPECS",
    "ServerStatus",
    "StackError",
    "add_stack_commands",
    "cluster_hosts",
    "down",
    "endpoint_overrides",
    "endpoints",
    "kind_of",
    "specs_of",
    "stack_dir",
    "start_server",
    "status",
    "stop_server",
    "up",
    "wait_ready",
]
