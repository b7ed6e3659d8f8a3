"""The local stack: real single-node Cassandra, Kafka, ZooKeeper and Redis on 127.0.0.1, under `.stack/`.

`tickwheel stack up | down | status | logs` (see `add_stack_commands`); `up`, `down` and `status` for code;
`start_server` / `stop_server` / `wait_ready` for tests that stop and restart a server.
"""

from tickwheel.dev.stack.commands import add_stack_commands, stack_dir
from tickwheel.dev.stack.lifecycle import (
    SPECS,
    ServerStatus,
    down,
    endpoint_overrides,
    endpoints,
    start_server,
    status,
    stop_server,
    up,
    wait_ready,
)
from tickwheel.dev.stack.process import StackError

__all__ = [
    "SPECS",
    "ServerStatus",
    "StackError",
    "add_stack_commands",
    "down",
    "endpoint_overrides",
    "endpoints",
    "stack_dir",
    "start_server",
    "status",
    "stop_server",
    "up",
    "wait_ready",
]
