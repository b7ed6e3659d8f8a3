"""Shared fixtures. Real-server fixtures are session-scoped: the local stack is started (or reused) once per
test run, one keyspace and one Kafka topic prefix are made for the run, and each test gets its own tenant,
ZooKeeper chroot and Redis key prefix. In CI (CI=true) a server that cannot be reached fails the run; it never
skips."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import uuid
from collections.abc import AsyncIterator, Generator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tickwheel.settings import Settings

if TYPE_CHECKING:
    from tickwheel.store.cassandra import CassandraStore

ROOT = Path(__file__).resolve().parent.parent
STACK_DIR = ROOT / ".stack"
RUN_ID = uuid.uuid4().hex[:8]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = str(item.path)
        if "/integration/" in path:
            item.add_marker(pytest.mark.integration)
        elif "/e2e/" in path:
            item.add_marker(pytest.mark.e2e)
    # Tiers in order: unit, integration, e2e. The e2e platform (a live dispatcher and worker on the run's keyspace
    # and topics) is session-scoped; started before the integration tests, it would fire and claim their runs.
    # Tests that restart a shared server come last in the integration tier: a restarted Kafka goes on loading
    # its coordinators for a while, and the timing tests that ran after it in CI failed (failover lag 12 s).
    items.sort(key=_order)


_TIER_ORDER = {"unit": 0, "integration": 1, "e2e": 3}


def _order(item: pytest.Item) -> int:
    tier = _tier(item)
    if tier == "integration" and item.get_closest_marker("restarts_servers") is not None:
        return 2
    return _TIER_ORDER[tier]


def _tier(item: pytest.Item) -> str:
    path = str(item.path)
    return "e2e" if "/e2e/" in path else "integration" if "/integration/" in path else "unit"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and call.when == "call" and ("integration" in item.keywords or "e2e" in item.keywords):
        report.sections.append(("server logs (tail)", _server_log_tails()))
        processes = _process_log_warnings(item)
        if processes:
            report.sections.append(("tickwheel process warnings (tail)", processes))
    return report


def _process_log_warnings(item: pytest.Item, lines: int = 20) -> str:
    """The last WARNING/ERROR lines of the tickwheel processes a failed test ran (the e2e platform's, and the
    `*.log` files a test wrote under its tmp_path): CI prints only the test output, never the machine."""
    funcargs = getattr(item, "funcargs", {})
    logs: list[Path] = list(getattr(funcargs.get("platform"), "logs", {}).values())
    tmp = funcargs.get("tmp_path")
    if isinstance(tmp, Path):
        logs += sorted(tmp.glob("*.log"))
    parts = []
    for log in logs:
        if log.exists():
            text = log.read_text(errors="replace")
            noisy = [line for line in text.splitlines() if "warning" in line.lower() or "error" in line.lower()]
            if noisy:
                parts.append(f"--- {log.name} ---\n" + "\n".join(noisy[-lines:]))
    return "\n".join(parts)


def server_of(kind: str) -> str:
    """The name the local stack gives its server of `kind` (`kafka`; `kafka-1` on a stack started with `--hosts`),
    from the stack's own record of its servers, for the tests that stop and start one."""
    from tickwheel.dev import stack

    names = [name for name in stack.specs_of(STACK_DIR) if stack.kind_of(name) == kind]
    assert names, f"no {kind} server in {STACK_DIR}"
    return names[0]


def _server_log_tails(lines: int = 15) -> str:
    from tickwheel.dev.stack import process, specs_of

    parts = []
    for name in specs_of(STACK_DIR):
        log = process.log_path(STACK_DIR, name)
        if log.exists():
            parts.append(f"--- {name} ({log}) ---\n{process.tail(log, lines)}")
    return "\n".join(parts) or "(no server logs under .stack/)"


@pytest.fixture(scope="session")
def stack_settings() -> Settings:
    """The local stack (started or reused) or the endpoints given in the environment."""
    from tickwheel.dev import stack

    try:
        stack.up(STACK_DIR, progress=lambda line: None)
    except Exception as exc:  # any failure to get servers is reported the same way
        message = f"the local stack could not be started: {exc}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return Settings.from_env(env_file=STACK_DIR / "env")


@pytest.fixture(scope="session")
async def settings(stack_settings: Settings) -> AsyncIterator[Settings]:
    """Settings for this test run: its own keyspace (migrated) and Kafka topic prefix (topics created)."""
    from tickwheel.commands import run_migrate

    test_settings = dataclasses.replace(
        stack_settings,
        cassandra=dataclasses.replace(stack_settings.cassandra, keyspace=f"tw_test_{RUN_ID}"),
        kafka=dataclasses.replace(
            stack_settings.kafka, topic_prefix=f"t{RUN_ID}.", lane_partitions=4, near_partitions=4
        ),
    )
    await run_migrate(test_settings)
    yield test_settings
    await drop_keyspace(test_settings)
    await _delete_topics(test_settings)


async def _delete_topics(test_settings: Settings) -> None:
    """Every run's topics (its prefix, and the tests' own prefixes under it) are deleted when the run ends."""
    if os.environ.get("TW_TEST_KEEP_KEYSPACE") == "1":
        return
    from tickwheel.bus.kafka import delete_topics

    try:
        await delete_topics(test_settings.kafka, test_settings.kafka.topic_prefix)
    except Exception as exc:  # the servers may be gone by now; the topics are only garbage
        print(f"could not delete topics {test_settings.kafka.topic_prefix}*: {exc}")


async def drop_keyspace(test_settings: Settings) -> None:
    """Every run's keyspace is dropped when the run ends: the shared Cassandra (1 GB heap) ran out of memory
    holding 175 of them (some 2 500 tables). TW_TEST_KEEP_KEYSPACE=1 keeps it for a post-mortem (not a
    TICKWHEEL_ name: those must all be settings)."""
    if os.environ.get("TW_TEST_KEEP_KEYSPACE") == "1":
        return
    from tickwheel.store import migrate

    try:
        await migrate.drop_keyspace(test_settings.cassandra)
    except Exception as exc:  # the servers may be gone by now; the keyspace is only garbage
        print(f"could not drop keyspace {test_settings.cassandra.keyspace}: {exc}")


@contextlib.asynccontextmanager
async def own_keyspace(settings: Settings, suffix: str) -> AsyncIterator[tuple[Settings, CassandraStore]]:
    """`settings` on a keyspace of their own (migrated, dropped after) and a store on it: for a test whose process
    reads whole tables (a sweep, a reconciler's pass), which in the run's shared keyspace hold every earlier test's
    jobs and due rows: the pass takes as long as the leftovers, and repairs them."""
    from tickwheel.store.cassandra import CassandraStore
    from tickwheel.store.migrate import migrate

    own = dataclasses.replace(
        settings, cassandra=dataclasses.replace(settings.cassandra, keyspace=f"{settings.cassandra.keyspace}_{suffix}")
    )
    await migrate(own.cassandra)
    opened = await CassandraStore.connect(own.cassandra)
    try:
        yield own, opened
    finally:
        await opened.close()
        await drop_keyspace(own)


@pytest.fixture(scope="session")
async def store(settings: Settings) -> AsyncIterator[object]:
    from tickwheel.store.cassandra import CassandraStore

    opened = await CassandraStore.connect(settings.cassandra)
    yield opened
    await opened.close()


@pytest.fixture
def namespace() -> str:
    """A fresh name for one test: use it as tenant id, ZooKeeper chroot suffix, Redis key prefix, topic prefix."""
    return f"t{uuid.uuid4().hex[:12]}"
