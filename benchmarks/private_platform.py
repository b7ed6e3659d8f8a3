"""A private platform on the shared stack's servers: own keyspace, topics, ZooKeeper chroot, Redis prefix and
free ports, so a benchmark can run beside other sessions (and two checkouts can be measured side by side).

    cd /tmp/bench-a && PYTHONPATH=<checkout> <venv>/bin/python -m benchmarks.private_platform up \
        --servers /work/main/.stack --name a
    cd /tmp/bench-a && PYTHONPATH=<checkout> <venv>/bin/python -m benchmarks.sustained --rates 50 --seconds 60
    cd /tmp/bench-a && PYTHONPATH=<checkout> <venv>/bin/python -m benchmarks.private_platform down

With `--own-cassandra v1|v2`, the platform gets a Cassandra of its own (same build and settings as the stack's,
on free ports, data under `.stack/cassandra/`, with that Paxos variant), so Cassandra's CPU per run is this
platform's alone: on a shared box the stack's Cassandra also serves every other session.

`up` writes `.stack/env` in the working directory (the servers' endpoints plus the namespace and ports), links
the servers' directories so their pid files are found (the probes count their CPU), applies the migrations and
starts api, coordinator, dispatcher and worker from the checkout on PYTHONPATH. The worker's per-host flow
limits are raised as in BENCHMARKS.md ("Sustained"): every run calls the one sink host.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import socket
import sys
import time
from pathlib import Path

from tickwheel.dev.platform import PROCESSES, ready, start_process
from tickwheel.dev.stack import process
from tickwheel.settings import Settings, read_env_file

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


def start_own_cassandra(stack_dir: Path, servers: Path, paxos_variant: str) -> str:
    """A private single-node Cassandra on free ports; returns its endpoint."""
    from tickwheel.dev.stack import cassandra

    native, storage = free_port(), free_port()
    home = stack_dir / "cassandra"
    for sub in ("conf", "data", "logs", "triggers", "tmp"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    lib = stack_dir / "lib"
    if not lib.exists():
        lib.symlink_to((servers / "lib").resolve())
    yaml = cassandra._YAML.replace(f": {cassandra.NATIVE_PORT}", f": {native}")
    yaml = yaml.replace(f"{cassandra.STORAGE_PORT}", f"{storage}")
    # Paxos v1 keeps `legacy` purging: Cassandra changes the purging mode only under v2
    dropped = ("paxos_variant", "paxos_state_purging") if paxos_variant == "v1" else ("paxos_variant",)
    yaml = "\n".join(line for line in yaml.splitlines() if not line.startswith(dropped))
    (home / "conf" / "cassandra.yaml").write_text(f"{yaml}\npaxos_variant: {paxos_variant}\n")
    (home / "conf" / "logback.xml").write_text(cassandra._LOGBACK)
    endpoint = f"127.0.0.1:{native}"
    if process.read_pid(stack_dir, "cassandra") is None:
        process.spawn(stack_dir, "cassandra", cassandra.command(stack_dir))
    deadline = time.monotonic() + 300
    while True:
        try:
            print(cassandra.probe(endpoint), "at", endpoint, f"(paxos {paxos_variant})")
            return endpoint
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


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
    # every node's directory under its own name (`cassandra`, or `cassandra-1`.. of a stack started with --hosts),
    # so the probes find each server's pid file
    for name in (n for kind in SERVERS for n in process.server_names(servers, kind)):
        link = stack_dir / name
        if not link.exists() and not link.is_symlink():
            link.symlink_to((servers / name).resolve())
    env = stack_dir / "env"
    env.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return env


def up(args: argparse.Namespace) -> int:
    if not re.fullmatch(r"[a-z0-9_]+", args.name):
        # CQL folds an unquoted keyspace name to lower case and the driver quotes it on USE: `--name L1` made
        # tw_bench_l1 and then failed to connect to "tw_bench_L1"
        raise SystemExit(f"--name {args.name!r}: lower-case letters, digits and _ only (it names the keyspace)")
    stack_dir = Path.cwd() / ".stack"
    extra = dict(pair.split("=", 1) for pair in args.set)
    if args.urgent_worker:
        extra["TICKWHEEL_WORKER_LANES"] = "default,bulk"
    if args.own_cassandra:
        stack_dir.mkdir(parents=True, exist_ok=True)
        own = start_own_cassandra(stack_dir, Path(args.servers), args.own_cassandra)
        extra["TICKWHEEL_CASSANDRA"] = own
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
    for n in range(2, args.workers + 1):
        start_extra_worker(stack_dir, n)
    if args.urgent_worker:
        start_extra_worker(stack_dir, args.workers + 1, {"TICKWHEEL_WORKER_LANES": "urgent"})
    return 0


def extra_workers(stack_dir: Path) -> dict[str, int]:
    """The extra worker processes of `--workers N` (`worker-2` ... `worker-N`) and their metrics ports."""
    found = {}
    for port_file in sorted(stack_dir.glob("worker-*/port")):
        found[port_file.parent.name] = int(port_file.read_text())
    return found


def start_extra_worker(stack_dir: Path, n: int, overrides: dict[str, str] | None = None) -> None:
    """One more `tickwheel worker` on the same settings (its own port), but for `overrides`: the lanes'
    partitions are shared out among every worker of the consumer group."""
    name, port = f"worker-{n}", free_port()
    own = {"TICKWHEEL_WORKER_PORT": str(port), **(overrides or {})}
    saved = {key: os.environ.get(key) for key in own}
    os.environ.update(own)  # process.spawn passes the environment on
    try:
        pid = process.spawn(stack_dir, name, [sys.executable, "-m", "tickwheel.cli", "worker"])
    finally:
        for key, value in saved.items():
            if value is None:
                del os.environ[key]
            else:
                os.environ[key] = value
    (stack_dir / name / "port").write_text(str(port))
    deadline = time.monotonic() + 60
    while not ready(port):
        if not process.is_running(pid) or time.monotonic() > deadline:
            raise SystemExit(f"{name} did not become ready: {process.log_path(stack_dir, name)}")
        time.sleep(0.3)
    print(f"{name}: ready, pid {pid}, port {port}")


def down(args: argparse.Namespace) -> int:
    stack_dir = Path.cwd() / ".stack"
    for name in [*extra_workers(stack_dir), *reversed(PROCESSES)]:
        print(f"{name}: {'stopped' if process.terminate(stack_dir, name) else 'not running'}")
        if name.startswith("worker-"):
            (stack_dir / name / "port").unlink(missing_ok=True)  # the next `up` may run fewer workers
    env = stack_dir / "env"
    if not args.keep and env.exists():  # the platform's processes are gone: nothing writes to it any more
        asyncio.run(drop_namespace(Settings.from_env(env_file=env)))
    if args.all and not (stack_dir / "cassandra").is_symlink():  # only a private one: shared servers are linked
        print(f"cassandra: {'stopped' if process.terminate(stack_dir, 'cassandra') else 'not running'}")
    return 0


async def drop_namespace(settings: Settings) -> None:
    """Drop the platform's keyspace and delete its topics, on servers that outlive it. Kept, they stayed on the
    benchmarks' reused servers: after ~40 platforms Cassandra's Paxos bookkeeping, every 5 minutes, merged the
    uncommitted-state files of each of their ~160 LWT tables and ran its auto repair over them, a burst of work in
    the middle of every later measurement (BENCHMARKS.md, session 16)."""
    from tickwheel.bus.kafka import delete_topics
    from tickwheel.store.migrate import drop_keyspace

    keyspace, prefix = settings.cassandra.keyspace, settings.kafka.topic_prefix
    try:  # the servers may be down: what is left is only garbage, and `down` still stops what it started
        await drop_keyspace(settings.cassandra)
        print(f"keyspace {keyspace}: dropped")
    except Exception as exc:
        print(f"keyspace {keyspace}: not dropped ({exc})")
    try:
        print(f"topics {prefix}*: {len(await delete_topics(settings.kafka, prefix))} deleted")
    except Exception as exc:
        print(f"topics {prefix}*: not deleted ({exc})")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up")
    p_up.add_argument("--servers", required=True, help="the shared stack directory (its env and pid files)")
    p_up.add_argument("--name", required=True, help="namespace suffix: keyspace tw_bench_<name>, topics, ...")
    p_up.add_argument("--set", action="append", default=[], help="extra KEY=VALUE settings")
    p_up.add_argument("--own-cassandra", choices=("v1", "v2"), help="a private Cassandra with this Paxos variant")
    p_up.add_argument("--workers", type=int, default=1, help="worker processes (the lanes' partitions are shared)")
    p_up.add_argument(
        "--urgent-worker", action="store_true", help="one more worker for the urgent lane alone; the others skip it"
    )
    p_up.set_defaults(func=up)
    p_down = sub.add_parser("down")
    p_down.add_argument("--all", action="store_true", help="also stop the private Cassandra")
    p_down.add_argument("--keep", action="store_true", help="keep the keyspace and topics (a post-mortem)")
    p_down.set_defaults(func=down)
    args = p.parse_args()
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
