"""`tickwheel stack up | down | status | logs`: argparse wiring for the CLI."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tickwheel.cli import DEV_COMMANDS
from tickwheel.dev.stack.lifecycle import SPECS, down, status, up
from tickwheel.dev.stack.process import StackError, log_path, tail


def stack_dir() -> Path:
    """The stack lives in `.stack/` of the working directory (the repository root, by convention)."""
    return Path.cwd() / ".stack"


def add_stack_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `stack` with its sub-commands; each sets `func(args) -> int`."""
    stack = subparsers.add_parser("stack", help=DEV_COMMANDS["stack"])
    commands = stack.add_subparsers(dest="stack_command", required=True)
    cmd_up = commands.add_parser("up", help="start the local servers and wait until they answer")
    cmd_up.add_argument("--only", type=_names, default=None, help=f"comma-separated subset of: {','.join(SPECS)}")
    cmd_up.set_defaults(func=run_up)
    commands.add_parser("down", help="stop the servers the stack started").set_defaults(func=run_down)
    commands.add_parser("status", help="probe every server; non-zero exit if any is unhealthy").set_defaults(
        func=run_status
    )
    cmd_logs = commands.add_parser("logs", help="print the tail of a server's log")
    cmd_logs.add_argument("name", choices=list(SPECS))
    cmd_logs.add_argument("-n", "--lines", type=int, default=50)
    cmd_logs.set_defaults(func=run_logs)


def _names(value: str) -> set[str]:
    names = {n.strip() for n in value.split(",") if n.strip()}
    unknown = names - set(SPECS)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown server(s) {', '.join(sorted(unknown))}")
    return names


def run_up(args: argparse.Namespace) -> int:
    started = time.monotonic()
    try:
        up(stack_dir(), only=args.only)
    except StackError as exc:
        print(f"stack up failed: {exc}", file=sys.stderr)
        return 1
    print(f"stack up in {time.monotonic() - started:.1f} s; endpoints in {stack_dir() / 'env'}")
    return 0


def run_down(args: argparse.Namespace) -> int:
    down(stack_dir())
    return 0


def run_status(args: argparse.Namespace) -> int:
    rows = status(stack_dir())
    print(f"{'server':<10} {'healthy':<8} {'pid':>8}  {'endpoint':<28} detail")
    for row in rows:
        pid = str(row.pid) if row.pid is not None else "-"
        health = "yes" if row.healthy else "NO"
        print(f"{row.name:<10} {health:<8} {pid:>8}  {row.endpoint:<28} {row.detail}")
    return 0 if all(row.healthy for row in rows) else 1


def run_logs(args: argparse.Namespace) -> int:
    print(tail(log_path(stack_dir(), args.name), args.lines))
    return 0
