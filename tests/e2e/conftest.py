"""The whole platform for end-to-end tests: api, coordinator, dispatcher and worker as real processes on the
test run's keyspace, topic prefix and ZooKeeper chroot, with a local sink as the only admitted target."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tickwheel.dev.platform import ready
from tickwheel.dev.sink import Sink
from tickwheel.settings import Settings

PROCESSES = ("api", "coordinator", "dispatcher", "worker")
OPERATOR_KEY = f"op-{uuid.uuid4().hex}"
STACK_DIR = Path(__file__).resolve().parents[2] / ".stack"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Platform:
    api_url: str
    env: dict[str, str]
    logs: dict[str, Path]
    operator_key: str = OPERATOR_KEY


def _env(settings: Settings, ports: dict[str, int]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWHEEL_")}
    run = settings.cassandra.keyspace.removeprefix("tw_test_")
    env.update(
        TICKWHEEL_ENV_FILE=str((STACK_DIR / "env").resolve()),
        # the servers this test session uses, not whatever .stack/env says by the time a process starts
        TICKWHEEL_CASSANDRA=",".join(settings.cassandra.hosts),
        TICKWHEEL_KAFKA=settings.kafka.bootstrap,
        TICKWHEEL_ZOOKEEPER=settings.zookeeper.hosts,
        TICKWHEEL_REDIS=settings.redis.url,
        TICKWHEEL_CASSANDRA_KEYSPACE=settings.cassandra.keyspace,
        TICKWHEEL_KAFKA_TOPIC_PREFIX=settings.kafka.topic_prefix,
        TICKWHEEL_KAFKA_LANE_PARTITIONS=str(settings.kafka.lane_partitions),
        TICKWHEEL_KAFKA_NEAR_PARTITIONS=str(settings.kafka.near_partitions),
        TICKWHEEL_ZOOKEEPER_CHROOT=f"/e2e-{run}",
        TICKWHEEL_REDIS_KEY_PREFIX=f"e2e{run}:",
        TICKWHEEL_WORKER_EGRESS_ALLOW="127.0.0.1/32",
        TICKWHEEL_API_MIN_INTERVAL_S="5",
        TICKWHEEL_API_PORT=str(ports["api"]),
        TICKWHEEL_COORDINATOR_PORT=str(ports["coordinator"]),
        TICKWHEEL_DISPATCHER_PORT=str(ports["dispatcher"]),
        TICKWHEEL_WORKER_PORT=str(ports["worker"]),
        TICKWHEEL_API_OPERATOR_KEY_SHA256=hashlib.sha256(OPERATOR_KEY.encode()).hexdigest(),
    )
    return env


@pytest.fixture(scope="session")
def platform(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    ports = {name: free_port() for name in PROCESSES}
    env = _env(settings, ports)
    log_dir = tmp_path_factory.mktemp("platform")
    procs, logs = {}, {}
    for name in PROCESSES:
        logs[name] = log_dir / f"{name}.log"
        with logs[name].open("wb") as out:
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", "tickwheel.cli", name], env=env, stdout=out, stderr=subprocess.STDOUT
            )
    try:
        deadline = time.monotonic() + 90
        for name in PROCESSES:
            while not ready(ports[name]):
                if procs[name].poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"{name} did not become ready:\n{logs[name].read_text()[-4000:]}")
                time.sleep(0.3)
        yield Platform(f"http://127.0.0.1:{ports['api']}", env, logs)
    finally:
        for proc in procs.values():
            proc.terminate()
        for name, proc in procs.items():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            print(f"--- {name} log tail ---\n{logs[name].read_text()[-2000:]}")


@pytest.fixture
async def sink() -> AsyncIterator[Sink]:
    async with Sink() as running:
        yield running
