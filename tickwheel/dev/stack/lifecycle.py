"""Bring the local stack up and down, report its status, and start/stop single servers (fault tests).

A stack directory holds either the single-node dev stack (the default, `.stack/`) or a cluster: three
Cassandra nodes, three Kafka brokers and three ZooKeeper servers on loopback addresses of their own (127.0.0.1,
.2, .3 by default, one port per kind) and one Redis. The file `cluster` in the directory lists the cluster's
hosts; every command reads it, so `status`, `down`, `start_server` and `stop_server` need only the directory.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tickwheel.dev.stack import cassandra, kafka, redis, zookeeper
from tickwheel.dev.stack.process import (
    ServerSpec,
    StackError,
    is_running,
    log_path,
    port_open,
    read_pid,
    server_lock,
    spawn,
    tail,
    terminate,
)
from tickwheel.settings import host_port

log = logging.getLogger(__name__)

# Start order matters on 2 cores: Cassandra is the slowest, so it starts first.
SPECS: dict[str, ServerSpec] = {spec.name: spec for spec in (cassandra.SPEC, kafka.SPEC, zookeeper.SPEC, redis.SPEC)}
CLUSTER_FILE = "cluster"
CLUSTER_HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")


# What a cluster's clients are told besides the endpoints: every keyspace on three replicas, QUORUM writes and
# reads (LWTs are SERIAL: tickwheel.store.cassandra); topics on three brokers (min.insync.replicas=2 is the
# brokers' default, acks=all the producer's).
def cluster_settings(nodes: int) -> dict[str, str]:
    """The settings a cluster of `nodes` gives its clients besides the endpoints."""
    return {
        "TICKWHEEL_CASSANDRA_REPLICATION": f"{{'class': 'SimpleStrategy', 'replication_factor': {nodes}}}",
        "TICKWHEEL_CASSANDRA_CONSISTENCY": "QUORUM",
        "TICKWHEEL_KAFKA_REPLICATION_FACTOR": str(nodes),
    }


LOG_TAIL_LINES = 40
_POLL_S = 0.5
_SPAWN_ORDER_WAIT_S = 600.0

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ServerStatus:
    """One server as `status` sees it; `pid` is None for an external endpoint or a stopped server."""

    name: str
    endpoint: str
    pid: int | None
    healthy: bool
    detail: str


def cluster_specs(hosts: Sequence[str]) -> dict[str, ServerSpec]:
    """A cluster on three `hosts` (or one): Cassandra nodes first (the slowest), then Kafka, ZooKeeper, Redis."""
    if len(hosts) not in (1, 3):  # one: a single-node stack on an address of its own (a soak's baseline)
        raise StackError(f"a cluster has three nodes (or one), got hosts {', '.join(hosts) or 'none'}")
    specs = [
        *(cassandra.node_spec(hosts, i) for i in range(len(hosts))),
        *(kafka.node_spec(hosts, i) for i in range(len(hosts))),
        *(zookeeper.node_spec(hosts, i) for i in range(len(hosts))),
        redis.cluster_spec(hosts),
    ]
    return {spec.name: spec for spec in specs}


def cluster_hosts(stack_dir: Path) -> tuple[str, ...]:
    """The hosts of the cluster in `stack_dir`; empty for the single-node stack."""
    try:
        return tuple(line.strip() for line in (stack_dir / CLUSTER_FILE).read_text().splitlines() if line.strip())
    except FileNotFoundError:
        return ()


def specs_of(stack_dir: Path) -> dict[str, ServerSpec]:
    """The servers of the stack in `stack_dir`, by name (`cassandra`, or `cassandra-1`.. in a cluster)."""
    hosts = cluster_hosts(stack_dir)
    return cluster_specs(hosts) if hosts else SPECS


def kind_of(name: str) -> str:
    """`cassandra` for `cassandra` and `cassandra-2`: the probe and the settings key go by kind."""
    return name.partition("-")[0]


def endpoint_overrides(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Endpoints given in the environment (TICKWHEEL_CASSANDRA, ..._KAFKA, ..._ZOOKEEPER, ..._REDIS), by name.

    The one place the stack reads them; a server given here is never started, and its value always wins.
    """
    env = os.environ if environ is None else environ
    return {name: env[spec.env_var] for name, spec in SPECS.items() if env.get(spec.env_var)}


def endpoints(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The endpoint of every server: the environment's if given, else the local stack's."""
    overrides = endpoint_overrides(environ)
    return {name: overrides.get(name, spec.endpoint) for name, spec in SPECS.items()}


def _spec(name: str, specs: Mapping[str, ServerSpec] = SPECS) -> ServerSpec:
    try:
        return specs[name]
    except KeyError:
        raise StackError(f"unknown server {name!r}; known: {', '.join(specs)}") from None


def wait_ready(
    name: str,
    endpoint: str,
    timeout_s: float,
    alive: Callable[[], bool] | None = None,
    probe: Callable[[str], str] | None = None,
) -> str:
    """Probe `endpoint` until it answers a real request; return the probe's detail.

    Raises StackError after `timeout_s`, or as soon as `alive()` says the server process has exited.
    """
    probe = probe or _spec(kind_of(name)).probe  # a cluster node's own probe also checks it sees its peers
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return probe(endpoint)
        except StackError as exc:
            last = exc
        if alive is not None and not alive():
            raise StackError(f"{name} exited before it was ready ({last})")
        if time.monotonic() >= deadline:
            raise StackError(f"{name} not ready at {endpoint} after {timeout_s:.0f} s ({last})")
        time.sleep(_POLL_S)


def _healthy(spec: ServerSpec) -> str | None:
    try:
        return spec.probe(spec.endpoint)
    except StackError:
        return None


def start_server(
    stack_dir: Path,
    name: str,
    progress: Progress = log.info,
    *,
    after: threading.Event | None = None,
    spawned: threading.Event | None = None,
) -> str:
    """Start one local server unless it is already running and healthy; wait until it answers.

    `after` / `spawned` order the spawns of parallel starts: this server spawns once `after` is set, and
    sets `spawned` when it has (or will not). Returns the probe's detail. On failure prints the tail of the
    server's log and raises StackError.
    """
    spec = _spec(name, specs_of(stack_dir))
    with server_lock(stack_dir, name):
        try:
            detail = _reuse(stack_dir, spec, progress)
            if detail is not None:
                return detail
            _ensure_port_free(spec)
            started = time.monotonic()
            spec.prepare(stack_dir)
            if after is not None:
                after.wait(timeout=_SPAWN_ORDER_WAIT_S)
            pid = spawn(stack_dir, name, spec.command(stack_dir))
        finally:
            if spawned is not None:
                spawned.set()
        progress(f"{name}: started pid {pid}, waiting up to {spec.timeout_s:.0f} s")
        detail = _wait_started(stack_dir, spec, pid, progress)
    progress(f"{name}: ready at {spec.endpoint} in {time.monotonic() - started:.1f} s ({detail})")
    return detail


def _wait_started(stack_dir: Path, spec: ServerSpec, pid: int, progress: Progress) -> str:
    try:
        return wait_ready(spec.name, spec.endpoint, spec.timeout_s, alive=lambda: is_running(pid), probe=spec.probe)
    except StackError:
        path = log_path(stack_dir, spec.name)
        progress(f"{spec.name}: last {LOG_TAIL_LINES} lines of {path}:\n{tail(path, LOG_TAIL_LINES)}")
        raise


def _reuse(stack_dir: Path, spec: ServerSpec, progress: Progress) -> str | None:
    """The probe's detail when the stack's own server is running and answering; else stop any leftover."""
    pid = read_pid(stack_dir, spec.name)
    if pid is None:
        return None
    detail = _healthy(spec)
    if detail is None:  # still starting (a crashed `up`), or hung: give it its start timeout
        progress(f"{spec.name}: pid {pid} is not answering yet; waiting up to {spec.timeout_s:.0f} s")
        try:
            detail = wait_ready(
                spec.name, spec.endpoint, spec.timeout_s, alive=lambda: is_running(pid), probe=spec.probe
            )
        except StackError as exc:
            progress(f"{spec.name}: pid {pid} {exc}; restarting it")
            terminate(stack_dir, spec.name)
            return None
    progress(f"{spec.name}: reusing pid {pid} at {spec.endpoint} ({detail})")
    return detail


def _ensure_port_free(spec: ServerSpec) -> None:
    """Refuse to start over a server the stack did not start (it would answer the probes for ours)."""
    host, port = host_port(spec.endpoint, 0)
    if port_open(host, port, timeout_s=0.5):
        raise StackError(
            f"{spec.name}: {host}:{port} is already in use by a process the stack did not start; "
            f"stop it, or set {spec.env_var}={spec.endpoint} to use it as an external endpoint"
        )


def stop_server(stack_dir: Path, name: str) -> bool:
    """Stop one server the stack started (by its pid file); returns whether one was running."""
    _spec(name, specs_of(stack_dir))
    with server_lock(stack_dir, name):
        return terminate(stack_dir, name)


def up(
    stack_dir: Path,
    only: set[str] | None = None,
    progress: Progress = print,
    *,
    cluster: Sequence[str] | None = None,
) -> dict[str, str]:
    """Bring up the local servers (all, or `only`), in parallel, Cassandra first; write <stack_dir>/env.

    `cluster` (three hosts) makes `stack_dir` a cluster's directory; a directory that is one stays one. Servers
    with an endpoint in the environment are not started (single-node stack only: a cluster is all local).
    Returns the endpoint of every server that is up (started, reused or external); a cluster's by kind, joined
    with commas. Raises StackError when any server fails to come up.
    """
    stack_dir.mkdir(parents=True, exist_ok=True)
    if cluster is not None:
        _claim_for_cluster(stack_dir, cluster)
    specs = specs_of(stack_dir)
    names = list(specs) if only is None else [n for n in specs if n in only or kind_of(n) in only]
    for unknown in (only or set()) - set(specs) - {kind_of(n) for n in specs}:
        raise StackError(f"unknown server {unknown!r}; known: {', '.join(specs)}")
    overrides = {} if cluster_hosts(stack_dir) else endpoint_overrides()
    for name in set(names) & set(overrides):
        progress(f"{name}: using {overrides[name]} from ${SPECS[name].env_var}; not starting it")
    local = [n for n in names if n not in overrides]
    first_spawned = threading.Event()  # the first server (Cassandra, the slowest) spawns before the others
    with ThreadPoolExecutor(max_workers=len(local) or 1) as pool:
        futures = {
            n: pool.submit(start_server, stack_dir, n, progress, **_order(i, first_spawned))
            for i, n in enumerate(local)
        }
    failed = {n: f.exception() for n, f in futures.items() if f.exception() is not None}
    result = _write_env(stack_dir, overrides)
    for line in (stack_dir / "env").read_text().splitlines():
        progress(f"  {line}")
    if failed:
        raise StackError("; ".join(f"{n}: {exc}" for n, exc in failed.items()))
    return result


def _order(index: int, first_spawned: threading.Event) -> dict[str, threading.Event | None]:
    """The first server signals its spawn; the others wait for it."""
    return {"after": None, "spawned": first_spawned} if index == 0 else {"after": first_spawned, "spawned": None}


def _claim_for_cluster(stack_dir: Path, hosts: Sequence[str]) -> None:
    """Write the directory's `cluster` file; refuse a directory that holds another stack."""
    cluster_specs(hosts)  # validates
    current = cluster_hosts(stack_dir)
    if current and current != tuple(hosts):
        raise StackError(f"{stack_dir} holds a cluster on {', '.join(current)}; stop it and use another directory")
    if not current and any(read_pid(stack_dir, name) is not None for name in SPECS):
        raise StackError(f"{stack_dir} runs a single-node stack; a cluster needs a directory of its own")
    (stack_dir / CLUSTER_FILE).write_text("".join(f"{h}\n" for h in hosts))


def _write_env(stack_dir: Path, overrides: Mapping[str, str]) -> dict[str, str]:
    """Write <stack_dir>/env: every external endpoint and every local server that is running.

    A cluster's env names all its nodes (a stopped node is still one the clients should know) and its settings.
    """
    hosts = cluster_hosts(stack_dir)
    if hosts:
        by_kind: dict[str, list[str]] = {}
        for spec in cluster_specs(hosts).values():
            by_kind.setdefault(spec.env_var, []).append(spec.endpoint)
        values = {env_var: ",".join(endpoints) for env_var, endpoints in by_kind.items()} | cluster_settings(len(hosts))
        values |= cassandra.client_settings(stack_dir, [n for n in cluster_specs(hosts) if kind_of(n) == "cassandra"])
        (stack_dir / "env").write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        return {kind_of(name): ",".join(e) for name, e in zip(SPECS, by_kind.values(), strict=True)}
    result = {
        name: overrides.get(name, spec.endpoint)
        for name, spec in SPECS.items()
        if name in overrides or read_pid(stack_dir, name) is not None
    }
    lines = [f"{SPECS[name].env_var}={endpoint}\n" for name, endpoint in result.items()]
    if "cassandra" in result and "cassandra" not in overrides:  # the stack's own node
        lines += [f"{key}={value}\n" for key, value in cassandra.client_settings(stack_dir, ["cassandra"]).items()]
    (stack_dir / "env").write_text("".join(lines))
    return result


def down(stack_dir: Path, progress: Progress = print) -> list[str]:
    """Stop every server the stack started (in parallel); a single-node stack's env keeps only external endpoints."""
    specs = specs_of(stack_dir)
    with ThreadPoolExecutor(max_workers=len(specs)) as pool:
        stopped = dict(zip(specs, pool.map(lambda n: stop_server(stack_dir, n), specs), strict=True))
    for name, was_running in stopped.items():
        progress(f"{name}: {'stopped' if was_running else 'not running'}")
    if stack_dir.is_dir():
        _write_env(stack_dir, endpoint_overrides())
    return [name for name, was_running in stopped.items() if was_running]


def status(stack_dir: Path) -> list[ServerStatus]:
    """Probe every server (external endpoints included; every node of a cluster) once, in parallel."""
    if cluster_hosts(stack_dir):
        targets = {name: spec.endpoint for name, spec in specs_of(stack_dir).items()}
        overrides: dict[str, str] = {}
    else:
        targets, overrides = endpoints(), endpoint_overrides()
    with ThreadPoolExecutor(max_workers=len(targets)) as pool:
        return list(pool.map(lambda n: _status(stack_dir, n, targets[n], n in overrides), targets))


def _status(stack_dir: Path, name: str, endpoint: str, external: bool) -> ServerStatus:
    pid = None if external else read_pid(stack_dir, name)
    if pid is None and not external:
        return ServerStatus(name, endpoint, None, False, "not running")
    try:
        return ServerStatus(name, endpoint, pid, True, _spec(name, specs_of(stack_dir)).probe(endpoint))
    except StackError as exc:
        return ServerStatus(name, endpoint, pid, False, str(exc))
