"""The development commands: `stack`, `up`, `down` and `sink`, registered by the CLI only when one of them runs."""

from __future__ import annotations

import argparse
from typing import Any

from tickwheel.cli import DEV_COMMANDS
from tickwheel.dev import platform
from tickwheel.dev.stack import add_stack_commands


def add_commands(subparsers: Any) -> None:
    add_stack_commands(subparsers)
    platform.add_commands(subparsers)
    p = subparsers.add_parser("sink", help=DEV_COMMANDS["sink"])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8090)
    p.set_defaults(func=_run_sink)


def _run_sink(args: argparse.Namespace) -> Any:
    from tickwheel.dev.sink import serve_sink

    return serve_sink(args.host, args.port)
