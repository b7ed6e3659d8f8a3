"""Bring the local stack up and down, report its status, and start/stop single servers (fault tests)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
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


def _spec(name: str) -> ServerSpec:
    try:
        return SPECS[name]
    except KeyError:
        raise StackError(f"unknown server {name!r}; known: {', '.join(SPECS)}") from None


def wait_ready(name: str, endpoint: str, timeout_s: float, alive: Callable[[], bool] | None = None) -> str:
    """Probe `endpoint` until it answers a real request; return the probe's detail.

    Raises StackError after `timeout_s`, or as soon as `alive()` says the server process has exited.
    """
    probe = _spec(name).probe
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


def _healthy(name: str, endpoint: str) -> str | None:
    try:
        return _spec(name).probe(endpoint)
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
    spec = _spec(name)
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
        return wait_ready(spec.name, spec.endpoint, spec.timeout_s, alive=lambda: is_running(pid))
    except StackError:
        path = log_path(stack_dir, spec.name)
        progress(f"{spec.name}: last {LOG_TAIL_LINES} lines of {path}:\n{tail(path, LOG_TAIL_LINES)}")
        raise


def _reuse(stack_dir: Path, spec: ServerSpec, progress: Progress) -> str | None:
    """The probe's detail when the stack's own server is running and answering; else stop any leftover."""
    pid = read_pid(stack_dir, spec.name)
    if pid is None:
        return None
    detail = _healthy(spec.name, spec.endpoint)
    if detail is None:  # still starting (a crashed `up`), or hung: give it its start timeout
        progress(f"{spec.name}: pid {pid} is not answering yet; waiting up to {spec.timeout_s:.0f} s")
        try:
            detail = wait_ready(spec.name, spec.endpoint, spec.timeout_s, alive=lambda: is_running(pid))
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
    _spec(name)
    with server_lock(stack_dir, name):
        return terminate(stack_dir, name)


def up(stack_dir: Path, only: set[str] | None = None, progress: Progress = print) -> dict[str, str]:
    """Bring up the local servers (all, or `only`), in parallel, Cassandra first; write .stack/env.

    Servers with an endpoint in the environment are not started. Returns the endpoint of every server
    that is up (started, reused or external). Raises StackError when any server fails to come up.
    """
    names = list(SPECS) if only is None else [n for n in SPECS if n in only]
    for unknown in (only or set()) - set(SPECS):
        raise StackError(f"unknown server {unknown!r}; known: {', '.join(SPECS)}")
    stack_dir.mkdir(parents=True, exist_ok=True)
    overrides = endpoint_overrides()
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
    for name, endpoint in result.items():
        progress(f"  {SPECS[name].env_var}={endpoint}")
    if failed:
        raise StackError("; ".join(f"{n}: {exc}" for n, exc in failed.items()))
    return result


def _order(index: int, first_spawned: threading.Event) -> dict[str, threading.Event | None]:
    """The first server signals its spawn; the others wait for it."""
    return {"after": None, "spawned": first_spawned} if index == 0 else {"after": first_spawned, "spawned": None}


def _write_env(stack_dir: Path, overrides: Mapping[str, str]) -> dict[str, str]:
    """Write .stack/env with every external endpoint and every local server that is running."""
    result = {
        name: overrides.get(name, spec.endpoint)
        for name, spec in SPECS.items()
        if name in overrides or read_pid(stack_dir, name) is not None
    }
    lines = [f"{SPECS[name].env_var}={endpoint}\n" for name, endpoint in result.items()]
    (stack_dir / "env").write_text("".join(lines))
    return result


def down(stack_dir: Path, progress: Progress = print) -> list[str]:
    """Stop every server the stack started (in parallel); .stack/env keeps only external endpoints."""
    with ThreadPoolExecutor(max_workers=len(SPECS)) as pool:
        stopped = dict(zip(SPECS, pool.map(lambda n: stop_server(stack_dir, n), SPECS), strict=True))
    for name, was_running in stopped.items():
        progress(f"{name}: {'stopped' if was_running else 'not running'}")
    if stack_dir.is_dir():
        _write_env(stack_dir, endpoint_overrides())
    return [name for name, was_running in stopped.items() if was_running]


def status(stack_dir: Path) -> list[ServerStatus]:
    """Probe every server (external endpoints included) once, in parallel."""
    targets = endpoints()
    with ThreadPoolExecutor(max_workers=len(targets)) as pool:
        return list(pool.map(lambda n: _status(stack_dir, n, targets[n]), targets))


def _status(stack_dir: Path, name: str, endpoint: str) -> ServerStatus:
    external = name in endpoint_overrides()
    pid = None if external else read_pid(stack_dir, name)
    if pid is None and not external:
        return ServerStatus(name, endpoint, None, False, "not running")
    try:
        return ServerStatus(name, endpoint, pid, True, _spec(name).probe(endpoint))
    except StackError as exc:
        return ServerStatus(name, endpoint, pid, False, str(exc))
