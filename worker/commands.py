"""The worker's extra CLI commands: `tickwheel sink`, the local HTTP target of tests, the demo and the e2e checker."""

from __future__ import annotations

import argparse
from typing import Any


def add_commands(subparsers: Any) -> None:
    p = subparsers.add_parser("sink", help="run a local HTTP sink that records calls and answers as the URL asks")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8090)
    p.set_defaults(func=_run_sink)


def _run_sink(args: argparse.Namespace) -> Any:
    from tickwheel.sink import serve_sink

    return serve_sink(args.host, args.port)
