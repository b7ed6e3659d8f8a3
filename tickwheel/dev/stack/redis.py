"""Redis from the Debian package (redis-server), without persistence."""

from __future__ import annotations

import dataclasses
import logging
import shutil
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from tickwheel.dev.stack.process import (
    ServerSpec,
    StackError,
    ensure_apt_packages,
    port_open,
    server_dir,
)
from tickwheel.settings import host_port

log = logging.getLogger(__name__)

NAME = "redis"
PORT = 16379
CLUSTER_PORT = 26379


def _installed() -> bool:
    return shutil.which("redis-server") is not None


def prepare(stack_dir: Path) -> None:
    ensure_apt_packages(_installed)
    server_dir(stack_dir, NAME).mkdir(parents=True, exist_ok=True)


def command(stack_dir: Path, port: int = PORT, host: str = "127.0.0.1") -> list[str]:
    server = shutil.which("redis-server") or "redis-server"
    return [
        server,
        "--port",
        str(port),
        "--bind",
        host,
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
        "--dir",
        str(server_dir(stack_dir, NAME).resolve()),
    ]


def probe(endpoint: str) -> str:
    """PING, then the server version from INFO."""
    host, port = host_port(endpoint, 6379)
    if not port_open(host, port):
        raise StackError(f"nothing listens on {host}:{port}")
    import redis

    client = redis.Redis.from_url(endpoint, socket_timeout=2, socket_connect_timeout=2)
    try:
        client.ping()
        version = client.info("server").get("redis_version", "?")
    except redis.RedisError as exc:
        raise StackError(f"Redis PING failed: {exc}") from exc
    finally:
        client.close()
    return f"Redis {version}"


SPEC = ServerSpec(
    name=NAME,
    env_var="TICKWHEEL_REDIS",
    endpoint=f"redis://127.0.0.1:{PORT}/0",
    timeout_s=20.0,
    prepare=prepare,
    command=command,
    probe=probe,
)


def cluster_spec(hosts: Sequence[str]) -> ServerSpec:
    """The one Redis of a cluster (it holds limits and caches, not truth), on the first host."""
    endpoint = f"redis://{hosts[0]}:{CLUSTER_PORT}/0"
    return dataclasses.replace(SPEC, endpoint=endpoint, command=partial(command, port=CLUSTER_PORT, host=hosts[0]))
