"""ZooKeeper from the Debian package (/usr/share/java/zookeeper.jar), standalone."""

from __future__ import annotations

import logging
import socket
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
_JAVA_DIR = Path("/usr/share/java")
_JARS = ("zookeeper.jar", "slf4j-log4j12.jar", "log4j-1.2.jar")

_ZOO_CFG = f"""\
tickTime=2000
initLimit=10
syncLimit=5
dataDir={{data_dir}}
clientPort={CLIENT_PORT}
clientPortAddress=127.0.0.1
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
    ensure_apt_packages(_installed)
    home = server_dir(stack_dir, NAME).resolve()
    (home / "data").mkdir(parents=True, exist_ok=True)
    (home / "zoo.cfg").write_text(_ZOO_CFG.format(data_dir=home / "data"))
    (home / "log4j.properties").write_text(_LOG4J)


def command(stack_dir: Path) -> list[str]:
    home = server_dir(stack_dir, NAME).resolve()
    classpath = ":".join([str(home), *(str(_JAVA_DIR / jar) for jar in _JARS)])
    return [
        java_bin(),
        "-Xms64m",
        "-Xmx256m",
        "-XX:+ExitOnOutOfMemoryError",
        f"-Dlog4j.configuration=file:{home / 'log4j.properties'}",
        "-Dzookeeper.admin.enableServer=false",
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
