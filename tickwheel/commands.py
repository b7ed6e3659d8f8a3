"""Platform commands: `migrate` (CQL migrations + Kafka topics) and the process entry points."""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from schemas.messages import LANES, topic_names
from tickwheel.bus.kafka import ensure_topics
from tickwheel.settings import Settings
from tickwheel.store.migrate import migrate

# process name -> module exposing `async def serve(settings) -> None`
PROCESSES = {
    "api": "api.main",
    "dispatcher": "dispatcher.main",
    "worker": "worker.main",
    "coordinator": "coordinator.main",
}


def add_commands(subparsers: Any) -> None:
    p = subparsers.add_parser("migrate", help="apply CQL migrations and create the platform's Kafka topics")
    p.set_defaults(func=lambda args: run_migrate())
    for name, module in PROCESSES.items():
        p = subparsers.add_parser(name, help=f"run the {name} process")
        p.set_defaults(func=_serve(name, module))


def _serve(name: str, module: str) -> Any:
    def run(args: argparse.Namespace) -> Any:
        from tickwheel.cli import load_settings

        settings = load_settings(name)
        return importlib.import_module(module).serve(settings)

    return run


async def run_migrate(settings: Settings | None = None) -> int:
    from tickwheel.cli import load_settings

    settings = settings or load_settings()
    applied = await migrate(settings.cassandra)
    print(f"cassandra keyspace {settings.cassandra.keyspace}: applied {applied or 'nothing (up to date)'}")
    created = await ensure_topics(settings.kafka, platform_topics(settings))
    print(f"kafka topics: created {created or 'nothing (all exist)'}")
    return 0


def platform_topics(settings: Settings) -> dict[str, int]:
    """Topic name -> partition count for every topic the platform uses."""
    names = topic_names(settings.kafka.topic_prefix)
    counts = {names[lane]: settings.kafka.lane_partitions for lane in LANES}
    counts[names["near"]] = settings.kafka.near_partitions
    return counts
