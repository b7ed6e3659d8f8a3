"""The `tickwheel` console script: the composition root that wires settings, logging and the processes.

Each command module contributes its sub-commands through `add_commands(subparsers)`; the process packages
(api, dispatcher, worker, coordinator) are loaded by name, so the shared package never imports them at import
time and no process imports another.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from collections.abc import Sequence

from tickwheel import logs
from tickwheel.errors import TickwheelError
from tickwheel.settings import Settings

COMMAND_MODULES = (
    "tickwheel.stack",
    "tickwheel.commands",
    "tickwheel.platform",
    "tickwheel.client",
    "api.commands",
    "dispatcher.commands",
    "worker.commands",
    "coordinator.commands",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tickwheel", description="tickwheel: a distributed job scheduler")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # a process package that contributes no commands of its own
                continue
            raise
        adder = getattr(module, "add_commands", None) or module.add_stack_commands
        adder(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = args.func(args)
        if asyncio.iscoroutine(result):
            result = run_async(result)
        return int(result or 0)
    except TickwheelError as exc:
        print(f"tickwheel: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def run_async(coro: object) -> object:
    """Run a command's coroutine on uvloop where available."""
    try:
        import uvloop

        return uvloop.run(coro)  # type: ignore[arg-type]
    except ImportError:
        return asyncio.run(coro)  # type: ignore[arg-type]


def load_settings(process: str | None = None) -> Settings:
    """Read settings once and configure JSON logging for a process."""
    settings = Settings.from_env()
    if process:
        logs.configure(settings.log_level, process)
    return settings


if __name__ == "__main__":
    sys.exit(main())
