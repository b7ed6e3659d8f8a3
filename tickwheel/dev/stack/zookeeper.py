"""ZooKeeper from the Debian package (/usr/share/java/zookeeper.jar): standalone, or the servers of an ensemble."""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from tickwheel.dev.stack.process import (
    ServerSpec,
    StackError,
    ensure_apt_packages,
    java_bin,
    server_dir,
)
from tickwheel.settings import host_port

log = logging.getLogger(__name__)
# kazoo's own logger for probe clients: "Connection dropped" while ZooKeeper starts is expected, not news.
_probe_log = logging.getLogger(f"{__name__}.probe")
_probe_log.propagate = False
_probe_log.addHandler(logging.NullHandler())

NAME = "zookeeper"
CLIENT_PORT = 21810
CLUSTER_CLIENT_PORT = 31810
CLUSTER_QUORUM_PORT = 22888
CLUSTER_ELECTION_PORT = 23888
_JAVA_DIR = Path("/usr/share/java")
_JARS = ("zookeeper.jar", "slf4j-log4j12.jar", "log4j-1.2.jar")

_ZOO_CFG = """\
tickTime=2000
initLimit=10
syncLimit=5
dataDir={data_dir}
clientPort={client_port}
clientPortAddress={host}
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=*
"""

_LOG4J = """\
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1} - %m%n
"""


def _installed() -> bool:
    return all((_JAVA_DIR / jar).exists() for jar in _JARS)


def prepare(stack_dir: Path) -> None:
    _prepare(stack_dir, NAME, "127.0.0.1", CLIENT_PORT, ensemble="")


def _prepare(stack_dir: Path, name: str, host: str, client_port: int, ensemble: str, myid: int = 0) -> None:
    ensure_apt_packages(_installed)
    home = server_dir(stack_dir, name).resolve()
    (home / "data").mkdir(parents=True, exist_ok=True)
    if myid:
        (home / "data" / "myid").write_text(f"{myid}\n")
    config = _ZOO_CFG.format(data_dir=home / "data", client_port=client_port, host=host)
    (home / "zoo.cfg").write_text(config + ensemble)
    (home / "log4j.properties").write_text(_LOG4J)


def _prepare_node(stack_dir: Path, hosts: Sequence[str], index: int) -> None:
    if len(hosts) == 1:  # a one-node "cluster" is a standalone server on its own address
        _prepare(stack_dir, f"{NAME}-1", hosts[0], CLUSTER_CLIENT_PORT, ensemble="")
        return
    ensemble = "".join(
        f"server.{i + 1}={h}:{CLUSTER_QUORUM_PORT}:{CLUSTER_ELECTION_PORT}\n" for i, h in enumerate(hosts)
    )
    _prepare(stack_dir, f"{NAME}-{index + 1}", hosts[index], CLUSTER_CLIENT_PORT, ensemble, myid=index + 1)


def command(stack_dir: Path, name: str = NAME) -> list[str]:
    home = server_dir(stack_dir, name).resolve()
    classpath = ":".join([str(home), *(str(_JAVA_DIR / jar) for jar in _JARS)])
    return [
        java_bin(),
        "-Xms64m",
        "-Xmx256m",
        "-XX:+ExitOnOutOfMemoryError",
        f"-Dlog4j.configuration=file:{home / 'log4j.properties'}",
        "-Dzookeeper.admin.enableServer=false",
        # After a leader is lost, the new leader binds its quorum port only once it has finished the election
        # and built its server: a follower that tries before that gives up after five tries 100 ms apart and goes
        # back to LOOKING, and the leader, waiting for a quorum, held on for initLimit * tickTime (20 s) before a
        # new election (~30 s without quorum at load 20-25, docs/reliability.md). Tries 1 s apart give the leader
        # 4 s to bind; a leader that still sees a voter LOOKING after 2 s of waiting gives up (ZOOKEEPER-3109).
        "-Dzookeeper.leaderConnectDelayDuringRetryMs=1000",
        "-Dzookeeper.leader.maxTimeToWaitForEpoch=2000",
        "-cp",
        classpath,
        "org.apache.zookeeper.server.quorum.QuorumPeerMain",
        str(home / "zoo.cfg"),
    ]


def _ruok(host: str, port: int) -> bool:
    """The `ruok` four-letter word: cheap liveness; unlike a bare connect it logs no stack trace."""
    try:
        with socket.create_connection((host, port), timeout=1.0) as sock:
            sock.sendall(b"ruok")
            return sock.recv(4) == b"imok"
    except OSError:
        return False


def probe(endpoint: str) -> str:
    """A kazoo session and a read of the root znode."""
    host, port = host_port(endpoint.split(",")[0], 2181)
    if not _ruok(host, port):
        raise StackError(f"no 'imok' from {host}:{port}")
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    client = KazooClient(hosts=endpoint, timeout=3.0, connection_retry=None, command_retry=None, logger=_probe_log)
    try:
        client.start(timeout=3.0)
        children = client.get_children("/")
    except (KazooTimeoutError, Exception) as exc:  # kazoo raises many types; any means "not ready"
        raise StackError(f"ZooKeeper request failed: {exc!r}") from exc
    finally:
        client.stop()
        client.close()
    return f"root has {len(children)} znode(s)"


SPEC = ServerSpec(
    name=NAME,
    env_var="TICKWHEEL_ZOOKEEPER",
    endpoint=f"127.0.0.1:{CLIENT_PORT}",
    timeout_s=20.0,
    prepare=prepare,
    command=command,
    probe=probe,
)


def node_spec(hosts: Sequence[str], index: int) -> ServerSpec:
    """Server `index` (0-based) of an ensemble on `hosts`; it answers once a quorum has elected a leader."""
    name = f"{NAME}-{index + 1}"
    return ServerSpec(
        name=name,
        env_var=SPEC.env_var,
        endpoint=f"{hosts[index]}:{CLUSTER_CLIENT_PORT}",
        timeout_s=120.0,
        prepare=partial(_prepare_node, hosts=hosts, index=index),
        command=partial(command, name=name),
        probe=probe,
    )
