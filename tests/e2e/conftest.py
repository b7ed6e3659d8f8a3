"""The whole platform for end-to-end tests: api, coordinator, dispatcher and worker as real processes on the
test run's keyspace, topic prefix and ZooKeeper chroot, with a local sink as the only admitted target."""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmarks.private_platform import free_port
from tickwheel.dev.platform import ready
from tickwheel.dev.sink import Sink
from tickwheel.settings import Settings

PROCESSES = ("api", "coordinator", "dispatcher", "worker")
OPERATOR_KEY = f"op-{uuid.uuid4().hex}"


@dataclass
class Platform:
    api_url: str
    env: dict[str, str]
    logs: dict[str, Path]
    operator_key: str = OPERATOR_KEY


def _env(settings: Settings, ports: dict[str, int]) -> dict[str, str]:
    """The processes run with this session's settings (its servers, keyspace and topics, not whatever .stack/env
    says by the time a process starts), in a namespace of their own, on free ports."""
    run = settings.cassandra.keyspace.removeprefix("tw_test_")
    operator_key_sha256 = hashlib.sha256(OPERATOR_KEY.encode()).hexdigest()
    platform_settings = dataclasses.replace(
        settings,
        zookeeper=dataclasses.replace(settings.zookeeper, chroot=f"/e2e-{run}"),
        redis=dataclasses.replace(settings.redis, key_prefix=f"e2e{run}:"),
        api=dataclasses.replace(
            settings.api, port=ports["api"], min_interval_s=5, operator_key_sha256=operator_key_sha256
        ),
        coordinator=dataclasses.replace(settings.coordinator, port=ports["coordinator"]),
        dispatcher=dataclasses.replace(settings.dispatcher, port=ports["dispatcher"]),
        worker=dataclasses.replace(settings.worker, port=ports["worker"], egress_allow=("127.0.0.1/32",)),
    )
    return platform_settings.process_env()


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
