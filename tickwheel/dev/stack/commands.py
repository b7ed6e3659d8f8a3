"""`tickwheel stack up | down | status | logs`: argparse wiring for the CLI.

`--nodes 3` means the three-node cluster, in `.stack-cluster/` unless `--dir` says otherwise; without it,
the single-node dev stack in `.stack/`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tickwheel.cli import DEV_COMMANDS
from tickwheel.dev.stack.lifecycle import CLUSTER_HOSTS, SPECS, down, kind_of, specs_of, status, up
from tickwheel.dev.stack.process import StackError, log_path, tail

CLUSTER_DIR = ".stack-cluster"


def stack_dir() -> Path:
    """The stack lives in `.stack/` of the working directory (the repository root, by convention)."""
    return Path.cwd() / ".stack"


def _dir(args: argparse.Namespace) -> Path:
    if args.dir is not None:
        return Path(args.dir).resolve()
    return Path.cwd() / CLUSTER_DIR if args.nodes == 3 else stack_dir()


def _where(command: argparse.ArgumentParser) -> None:
    command.add_argument("--nodes", type=int, choices=(1, 3), default=1, help="1: the dev stack; 3: the cluster")
    command.add_argument("--dir", default=None, help=f"the stack's directory (default .stack, or {CLUSTER_DIR})")


def add_stack_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `stack` with its sub-commands; each sets `func(args) -> int`."""
    stack = subparsers.add_parser("stack", help=DEV_COMMANDS["stack"])
    commands = stack.add_subparsers(dest="stack_command", required=True)
    cmd_up = commands.add_parser("up", help="start the local servers and wait until they answer")
    cmd_up.add_argument("--only", type=_names, default=None, help=f"comma-separated subset of: {','.join(SPECS)}")
    cmd_up.add_argument(
        "--hosts",
        type=_hosts,
        default=None,
        help=f"the nodes' loopback addresses (--nodes 3: default {','.join(CLUSTER_HOSTS)}; --nodes 1 with --hosts "
        "and --dir: a single node on an address of its own, e.g. a soak's baseline beside the dev stack)",
    )
    _where(cmd_up)
    cmd_up.set_defaults(func=run_up)
    cmd_down = commands.add_parser("down", help="stop the servers the stack started")
    _where(cmd_down)
    cmd_down.set_defaults(func=run_down)
    cmd_status = commands.add_parser("status", help="probe every server; non-zero exit if any is unhealthy")
    _where(cmd_status)
    cmd_status.set_defaults(func=run_status)
    cmd_logs = commands.add_parser("logs", help="print the tail of a server's log")
    cmd_logs.add_argument("name", help=f"{', '.join(SPECS)}, or a cluster's node: cassandra-1, kafka-2, ...")
    cmd_logs.add_argument("-n", "--lines", type=int, default=50)
    _where(cmd_logs)
    cmd_logs.set_defaults(func=run_logs)


def _names(value: str) -> set[str]:
    """Kinds (`kafka`) or a cluster's nodes (`kafka-2`); `up` checks the nodes against the directory's stack."""
    names = {n.strip() for n in value.split(",") if n.strip()}
    unknown = {n for n in names if kind_of(n) not in SPECS}
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown server(s) {', '.join(sorted(unknown))}")
    return names


def _hosts(value: str) -> tuple[str, ...]:
    return tuple(h.strip() for h in value.split(",") if h.strip())


def run_up(args: argparse.Namespace) -> int:
    started = time.monotonic()
    where = _dir(args)
    cluster = args.hosts or (CLUSTER_HOSTS if args.nodes == 3 else None)
    if cluster is not None and len(cluster) != args.nodes:
        print(f"--hosts names {len(cluster)} addresses for --nodes {args.nodes}", file=sys.stderr)
        return 2
    try:
        up(where, only=args.only, cluster=cluster)
    except StackError as exc:
        print(f"stack up failed: {exc}", file=sys.stderr)
        return 1
    print(f"stack up in {time.monotonic() - started:.1f} s; endpoints in {where / 'env'}")
    return 0


def run_down(args: argparse.Namespace) -> int:
    down(_dir(args))
    return 0


def run_status(args: argparse.Namespace) -> int:
    rows = status(_dir(args))
    print(f"{'server':<12} {'healthy':<8} {'pid':>8}  {'endpoint':<28} detail")
    for row in rows:
        pid = str(row.pid) if row.pid is not None else "-"
        health = "yes" if row.healthy else "NO"
        print(f"{row.name:<12} {health:<8} {pid:>8}  {row.endpoint:<28} {row.detail}")
    return 0 if all(row.healthy for row in rows) else 1


def run_logs(args: argparse.Namespace) -> int:
    where = _dir(args)
    if args.name not in specs_of(where):
        print(f"no server {args.name!r} in {where}; known: {', '.join(specs_of(where))}", file=sys.stderr)
        return 2
    print(tail(log_path(where, args.name), args.lines))
    return 0
