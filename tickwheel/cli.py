"""The `tickwheel` console script: the composition root that wires settings, logging and the processes.

Each command module contributes its sub-commands through `add_commands(subparsers)`; the process packages
(api, dispatcher, worker, coordinator) are loaded by name, so the shared package never imports them at import
time and no process imports another.

The tenant-facing commands (`jobs`, `runs`, `dlq`, `completion`) belong to the client distribution
(`client/`, package `tickwheel_client`), which installs a `tickwheel` script of its own. Each front door hands
the other's commands over: `main` here passes those to `tickwheel_client.cli.main`, and the client's passes
the server's commands (`server_commands`) here, so one `tickwheel` offers both whichever script is installed.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence

from tickwheel import logs
from tickwheel.errors import TickwheelError
from tickwheel.settings import Settings

COMMAND_MODULES = (
    "tickwheel.commands",
    "api.commands",
    "dispatcher.commands",
    "coordinator.commands",
)
# Development-only commands (tickwheel/dev). Listed here so that `--help` shows them; their module is imported only
# when one of them runs, so a production process started through this CLI never loads the local platform.
DEV_COMMANDS_MODULE = "tickwheel.dev.commands"
DEV_COMMANDS = {
    "stack": "local Cassandra, Kafka, ZooKeeper and Redis",
    "up": "bring up the whole platform locally (servers, schema, processes)",
    "down": "stop the platform processes (and with --all, the servers too)",
    "sink": "run a local HTTP sink that records calls and answers as the URL asks",
}


CLIENT_COMMANDS = {
    "jobs": "create, list, get, edit, pause, resume, delete, preview jobs (tickwheel_client)",
    "runs": "a job's runs, one run with its attempts (tickwheel_client)",
    "dlq": "dead letters: list, redrive [--dry-run] (tickwheel_client)",
    "completion": "print the shell completion script (tickwheel_client)",
}
CLIENT_OPTIONS = ("--profile", "--api-url")
COMPLETION_VARIABLE = "_TICKWHEEL_COMPLETE"


def build_parser(dev: bool = False) -> argparse.ArgumentParser:
    """The parser of every command; with `dev`, the development commands can run (their module is imported)."""
    return _parser_and_commands(dev)[0]


def _parser_and_commands(
    dev: bool = False,
) -> tuple[argparse.ArgumentParser, argparse._SubParsersAction[argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(prog="tickwheel", description="tickwheel: a distributed job scheduler")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name, help_text in CLIENT_COMMANDS.items():  # listed in --help; main() hands them to the client
        subparsers.add_parser(name, help=help_text, add_help=False)
    if not dev:  # listed in --help; main() builds the parser with them when one is asked for
        for name, help_text in DEV_COMMANDS.items():
            subparsers.add_parser(name, help=help_text, add_help=False)
    for name in (*COMMAND_MODULES, DEV_COMMANDS_MODULE) if dev else COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # a process package that contributes no commands of its own
                continue
            raise
        module.add_commands(subparsers)
    return parser, subparsers


def server_commands(dev: bool = False) -> dict[str, str]:
    """The commands this package runs, with their help (the client's front door lists them)."""
    _, subparsers = _parser_and_commands(dev)
    listed = subparsers._choices_actions  # argparse keeps each command's help only there
    return {choice.dest: choice.help or "" for choice in listed if choice.dest not in CLIENT_COMMANDS}


def _for_client(argv: Sequence[str]) -> bool:
    first = argv[0] if argv else ""
    return first in CLIENT_COMMANDS or first.split("=")[0] in CLIENT_OPTIONS or COMPLETION_VARIABLE in os.environ


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if _for_client(argv):
        if importlib.util.find_spec("tickwheel_client") is None:
            print("tickwheel: the tenant commands come with the client: pip install ./client", file=sys.stderr)
            return 2
        client_cli = importlib.import_module("tickwheel_client.cli.main")
        return int(client_cli.main(argv))
    args = build_parser(dev=bool(argv) and argv[0] in DEV_COMMANDS).parse_args(argv)
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
