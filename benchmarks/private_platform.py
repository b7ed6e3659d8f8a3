"""A private platform on the shared stack's servers: own keyspace, topics, ZooKeeper chroot, Redis prefix and
free ports, so a benchmark can run beside other sessions (and two checkouts can be measured side by side).

    cd /tmp/bench-a && PYTHONPATH=<checkout> <venv>/bin/python -m benchmarks.private_platform up \
        --servers /work/main/.stack --name a
    cd /tmp/bench-a && PYTHONPATH=<checkout> <venv>/bin/python -m benchmarks.sustained --rates 50 --seconds 60
    cd /tmp/bench-a && PYTHONPATH=<checkout> <venv>/bin/python -m benchmarks.private_platform down

`up` writes `.stack/env` in the working directory (the servers' endpoints plus the namespace and ports), links
the servers' directories so their pid files are found (the probes count their CPU), applies the migrations and
starts api, coordinator, dispatcher and worker from the checkout on PYTHONPATH. The worker's per-host flow
limits are raised as in BENCHMARKS.md ("Sustained"): every run calls the one sink host.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from pathlib import Path

from tickwheel.platform import PROCESSES, start_process
from tickwheel.settings import Settings, read_env_file
from tickwheel.stack import process

SERVERS = ("cassandra", "kafka", "zookeeper", "redis")
RAISED_LIMITS = {
    "TICKWHEEL_WORKER_TARGET_CONCURRENCY": "100000",
    "TICKWHEEL_WORKER_TARGET_RATE_PER_S": "1000000",
    "TICKWHEEL_WORKER_TENANT_CONCURRENCY": "100000",
    "TICKWHEEL_WORKER_EGRESS_ALLOW": "127.0.0.1/32",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_env(stack_dir: Path, servers: Path, name: str, extra: dict[str, str]) -> Path:
    values = read_env_file(servers / "env")  # the servers' endpoints
    values |= {
        "TICKWHEEL_CASSANDRA_KEYSPACE": f"tw_bench_{name}",
        "TICKWHEEL_KAFKA_TOPIC_PREFIX": f"twbench.{name}.",
        "TICKWHEEL_ZOOKEEPER_CHROOT": f"/twbench-{name}",
        "TICKWHEEL_REDIS_KEY_PREFIX": f"twbench:{name}:",
        **{f"TICKWHEEL_{p.upper()}_PORT": str(free_port()) for p in PROCESSES},
        **RAISED_LIMITS,
        **extra,
    }
    stack_dir.mkdir(parents=True, exist_ok=True)
    for server in SERVERS:
        link = stack_dir / server
        if not link.exists():
            link.symlink_to((servers / server).resolve())
    env = stack_dir / "env"
    env.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return env


def up(args: argparse.Namespace) -> int:
    stack_dir = Path.cwd() / ".stack"
    extra = dict(pair.split("=", 1) for pair in args.set)
    env = write_env(stack_dir, Path(args.servers), args.name, extra)
    os.environ["TICKWHEEL_ENV_FILE"] = str(env.resolve())
    settings = Settings.from_env(env_file=env)
    from tickwheel.commands import run_migrate

    asyncio.run(run_migrate(settings))
    ports = {
        "api": settings.api.port,
        "coordinator": settings.coordinator.port,
        "dispatcher": settings.dispatcher.port,
        "worker": settings.worker.port,
    }
    for name, port in ports.items():
        start_process(stack_dir, name, port)
    return 0


def down(args: argparse.Namespace) -> int:
    stack_dir = Path.cwd() / ".stack"
    for name in reversed(PROCESSES):
        print(f"{name}: {'stopped' if process.terminate(stack_dir, name) else 'not running'}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up")
    p_up.add_argument("--servers", required=True, help="the shared stack directory (its env and pid files)")
    p_up.add_argument("--name", required=True, help="namespace suffix: keyspace tw_bench_<name>, topics, ...")
    p_up.add_argument("--set", action="append", default=[], help="extra KEY=VALUE settings")
    p_up.set_defaults(func=up)
    sub.add_parser("down").set_defaults(func=down)
    args = p.parse_args()
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
