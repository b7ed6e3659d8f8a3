"""The whole platform for end-to-end tests: api, coordinator, dispatcher and worker as real processes on a
keyspace, topic prefix and ZooKeeper chroot of the e2e tier's own, with a local sink as the only admitted target."""

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
from tests.conftest import drop_keyspace
from tickwheel.dev.platform import ready
from tickwheel.dev.sink import Sink
from tickwheel.settings import Settings
from tickwheel.store.cassandra import CassandraStore

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
        # No shedding for loop lag: a CI box at load 20-60 lags every process's loop, and these tests' clients do
        # not retry a 503 (tests/unit/api/test_admission.py covers the shedding).
        api=dataclasses.replace(
            settings.api,
            port=ports["api"],
            min_interval_s=5,
            operator_key_sha256=operator_key_sha256,
            lag_target_s=0.0,
        ),
        coordinator=dataclasses.replace(settings.coordinator, port=ports["coordinator"]),
        dispatcher=dataclasses.replace(settings.dispatcher, port=ports["dispatcher"]),
        worker=dataclasses.replace(settings.worker, port=ports["worker"], egress_allow=("127.0.0.1/32",)),
    )
    return platform_settings.process_env()


@pytest.fixture(scope="session")
async def settings(settings: Settings) -> AsyncIterator[Settings]:
    """The run's settings on a keyspace and a topic prefix of the e2e tier's own. The run's shared keyspace holds
    every integration test's jobs and due rows by now (thousands): the platform's dispatcher would fire them,
    its worker call their targets and its coordinator sweep and repair them while the e2e tests run and wait."""
    from tickwheel.commands import run_migrate

    own = dataclasses.replace(
        settings,
        cassandra=dataclasses.replace(settings.cassandra, keyspace=f"{settings.cassandra.keyspace}_e2e"),
        kafka=dataclasses.replace(settings.kafka, topic_prefix=f"{settings.kafka.topic_prefix}e2e."),
    )
    await run_migrate(own)
    yield own
    await drop_keyspace(own)  # its topics are under the run's prefix: deleted with the run's


@pytest.fixture(scope="session")
async def store(settings: Settings) -> AsyncIterator[CassandraStore]:
    """A store on the e2e tier's keyspace (the platform's)."""
    opened = await CassandraStore.connect(settings.cassandra)
    yield opened
    await opened.close()


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
