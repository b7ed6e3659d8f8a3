"""`tickwheel up` / `tickwheel down`: the whole platform on this machine.

Brings up the local stack, applies migrations, then starts api, coordinator, dispatcher and worker as
processes (logs and pid files under .stack/<process>/), and waits until each answers /readyz. The process
runner is the stack's own (`tickwheel.dev.stack.process`), so `down` stops only what `up` started, by pid.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tickwheel.cli import DEV_COMMANDS
from tickwheel.dev import stack
from tickwheel.dev.stack import process
from tickwheel.settings import Settings

PROCESSES = ("api", "coordinator", "dispatcher", "worker")
READY_TIMEOUT_S = 60.0


def ports(settings: Settings) -> dict[str, int]:
    return {
        "api": settings.api.port,
        "coordinator": settings.coordinator.port,
        "dispatcher": settings.dispatcher.port,
        "worker": settings.worker.port,
    }


def up(stack_dir: Path, progress: Any = print) -> Settings:
    """Stack, migrations, processes; returns the settings the processes run with."""
    operator_key_file = ensure_operator_key(stack_dir)
    progress("== servers: Cassandra, Kafka, ZooKeeper, Redis (real, local, on 127.0.0.1)")
    stack.up(stack_dir, progress=progress)
    environ = process_environment(stack_dir, os.environ)
    settings = Settings.from_env(environ)
    progress("== schema: CQL migrations and Kafka topics")
    from tickwheel.commands import run_migrate

    asyncio.run(run_migrate(settings))
    progress("== processes: " + ", ".join(PROCESSES))
    for name, port in ports(settings).items():
        start_process(stack_dir, name, port, progress, environ)
    progress(f"== console: {console_url(settings)}  (operator key in {operator_key_file})")
    return settings


def process_environment(stack_dir: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of the processes `up` starts: `environ` over the local platform's defaults, naming
    .stack/env explicitly (a process reads it only when told to; they run with .stack/<name>/ as cwd)."""
    local_defaults = {
        # Locally the worker may call loopback targets (the demo's sink); production has no such default.
        "TICKWHEEL_WORKER_EGRESS_ALLOW": "127.0.0.1/32",
        "TICKWHEEL_API_OPERATOR_KEY_SHA256": operator_key_sha256(stack_dir),
    }
    return {**local_defaults, **environ, "TICKWHEEL_ENV_FILE": str((stack_dir / "env").resolve())}


def local_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """The local platform's settings: `environ` (default: this process's) over .stack/env, as `up` gives them."""
    return Settings.from_env(environ, env_file=stack.stack_dir() / "env")


def console_url(settings: Settings) -> str:
    return f"http://127.0.0.1:{settings.api.port}/console/"


def ensure_operator_key(stack_dir: Path) -> Path:
    """The local operator key (made once, kept in .stack/operator-key); the API gets only its sha256."""
    key_file = stack_dir / "operator-key"
    if not key_file.is_file():
        stack_dir.mkdir(parents=True, exist_ok=True)
        key_file.write_text(f"op_{secrets.token_urlsafe(24)}\n")
        key_file.chmod(0o600)
    return key_file


def operator_key_sha256(stack_dir: Path) -> str:
    """The sha256 (hex) of the local operator key: all the API is given of it."""
    return hashlib.sha256(ensure_operator_key(stack_dir).read_text().strip().encode()).hexdigest()


def start_process(
    stack_dir: Path, name: str, port: int, progress: Any = print, environ: Mapping[str, str] | None = None
) -> int:
    """Start one platform process unless it already runs (with `environ`, default this one's); wait for /readyz."""
    pid = process.read_pid(stack_dir, name)
    if pid is not None and ready(port):
        progress(f"{name}: reusing pid {pid} on port {port}")
        return pid
    if pid is not None:
        process.terminate(stack_dir, name)
    pid = process.spawn(stack_dir, name, [sys.executable, "-m", "tickwheel.cli", name], environ)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready(port):
        if not process.is_running(pid) or time.monotonic() > deadline:
            log = process.log_path(stack_dir, name)
            raise stack.StackError(f"{name} did not become ready; last lines of {log}:\n{process.tail(log, 30)}")
        time.sleep(0.3)
    progress(f"{name}: ready, pid {pid}, http://127.0.0.1:{port}/metrics")
    return pid


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def down(stack_dir: Path, progress: Any = print) -> None:
    """Stop the platform processes this machine's `up` started (the servers stay: `tickwheel stack down`)."""
    for name in reversed(PROCESSES):
        stopped = process.terminate(stack_dir, name)
        progress(f"{name}: {'stopped' if stopped else 'not running'}")


def add_commands(subparsers: Any) -> None:
    p = subparsers.add_parser("up", help=DEV_COMMANDS["up"])
    p.add_argument("--demo", action="store_true", help="then create a demo tenant and jobs and show them run")
    p.set_defaults(func=_run_up)
    p = subparsers.add_parser("down", help=DEV_COMMANDS["down"])
    p.add_argument("--all", action="store_true", help="also stop Cassandra, Kafka, ZooKeeper and Redis")
    p.set_defaults(func=_run_down)


def _run_up(args: Any) -> int:
    stack_dir = stack.stack_dir()
    settings = up(stack_dir)
    if args.demo:
        from tickwheel.dev.demo import run_demo

        return int(asyncio.run(run_demo(settings, stack_dir)))
    return 0


def _run_down(args: Any) -> int:
    stack_dir = stack.stack_dir()
    down(stack_dir)
    if args.all:
        stack.down(stack_dir)
    return 0
