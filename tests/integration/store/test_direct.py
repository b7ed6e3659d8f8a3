"""The store's direct path (store.direct) on the real Cassandra: statements answered without the driver's Session
path, the same rows, pages and refusals as through it."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from cassandra import InvalidRequest

from tickwheel.settings import Settings
from tickwheel.store.cassandra import CassandraStore

TABLE = "direct_path_check"
WRITE = f"INSERT INTO {TABLE} (k, c, v) VALUES (?, ?, ?) USING TTL ?"
READ = f"SELECT c, v FROM {TABLE} WHERE k = ?"
CLAIM = f"UPDATE {TABLE} SET v = ? WHERE k = ? AND c = ? IF v = ?"


@pytest.fixture
async def direct_store(settings: Settings) -> AsyncIterator[tuple[CassandraStore, list[Any]]]:
    """A store whose connections are the loop's, and the statements its driver's Session path was asked to send."""
    store = await CassandraStore.connect(dataclasses.replace(settings.cassandra, driver_io="loop"))
    await store.execute_raw(f"CREATE TABLE IF NOT EXISTS {TABLE} (k uuid, c int, v text, PRIMARY KEY (k, c))")
    through_driver: list[Any] = []
    execute_async = store._session.execute_async

    def counted(statement: Any, *args: Any, **kwargs: Any) -> Any:
        through_driver.append(statement)
        return execute_async(statement, *args, **kwargs)

    store._session.execute_async = counted
    yield store, through_driver
    await store.close()


async def test_writes_reads_batches_and_conditional_writes_are_answered_without_the_drivers_session_path(
    direct_store: tuple[CassandraStore, list[Any]],
) -> None:
    store, through_driver = direct_store
    key = uuid.uuid4()
    await store.execute(WRITE, [key, 1, "a", 600])
    await store.batch([(WRITE, [key, 2, "b", 600]), (WRITE, [key, 3, "c", 600])], logged=False)
    await store.batch([(WRITE, [key, 4, "d", 600])], logged=True)
    assert await store.execute(READ, [key]) == [{"c": 1, "v": "a"}, {"c": 2, "v": "b"}, {"c": 3, "v": "c"},
                                                {"c": 4, "v": "d"}]  # fmt: skip
    assert await store.applied(CLAIM, ["A", key, 1, "a"]) == (True, {"[applied]": True})
    applied, row = await store.applied(CLAIM, ["B", key, 1, "a"])  # refused: the row as it is now comes back
    assert not applied and row["v"] == "A"
    assert through_driver == []


async def test_pages_come_one_at_a_time_with_their_cursor(direct_store: tuple[CassandraStore, list[Any]]) -> None:
    store, through_driver = direct_store
    key = uuid.uuid4()
    await store.batch([(WRITE, [key, c, str(c), 600]) for c in range(5)], logged=False)
    seen: list[int] = []
    cursor: str | None = None
    for _ in range(3):
        rows, cursor = await store.page(READ, [key], page_size=2, cursor=cursor)
        seen.extend(row["c"] for row in rows)
    assert seen == [0, 1, 2, 3, 4] and cursor is None
    assert through_driver == []


async def test_a_value_the_node_refuses_is_raised_as_the_driver_raises_it_and_not_sent_again(
    direct_store: tuple[CassandraStore, list[Any]],
) -> None:
    store, through_driver = direct_store
    with pytest.raises(InvalidRequest, match="TTL"):
        await store.execute(WRITE, [uuid.uuid4(), 1, "a", -1])
    assert through_driver == []


async def test_a_statement_the_node_forgot_goes_through_the_drivers_path_which_prepares_it_again(
    direct_store: tuple[CassandraStore, list[Any]],
) -> None:
    """A node answers "unprepared" for a statement it no longer knows (restarted, or its table dropped): that answer
    means it ran nothing, and the driver's path prepares the statement there again and sends it."""
    store, through_driver = direct_store
    key = uuid.uuid4()
    await store.execute(READ, [key])
    await store.execute_raw(f"DROP TABLE {TABLE}")  # the node forgets the statements prepared on it
    await store.execute_raw(f"CREATE TABLE {TABLE} (k uuid, c int, v text, PRIMARY KEY (k, c))")
    through_driver.clear()
    assert await store.execute(READ, [key]) == []
    assert len(through_driver) == 1
    assert await store.execute(READ, [key]) == []  # prepared again: direct once more
    assert len(through_driver) == 1
    # Every open cluster of this process refreshes its schema metadata within the driver's event window after a
    # table change; waited out here, so that it cannot land in a later test that counts the process's garbage
    # (test_driver_options.py: the cyclic-collector test saw this refresh's metadata objects).
    await asyncio.sleep(store._cluster.schema_event_refresh_window + 1.0)


async def test_a_conditional_write_whose_answer_is_lost_after_it_applied_is_settled_as_applied(
    direct_store: tuple[CassandraStore, list[Any]],
) -> None:
    """A conditional write unanswered in time is not sent again blindly: its timeout is raised as the driver raises
    it, and the store's SERIAL read of its row finds it applied (CassandraStore.applied)."""
    store, _ = direct_store
    key = uuid.uuid4()
    await store.execute(WRITE, [key, 1, "a", 600])
    assert store._direct is not None
    store._direct._timeout_s = 0.000_001  # the conditional write's answer comes too late: it is lost
    store._direct._speculate_after_s = 30.0  # the SERIAL read that settles it is answered
    assert await store.applied(CLAIM, ["A", key, 1, "a"]) == (True, {"k": key, "c": 1, "v": "A"})
    assert await store.execute(READ, [key]) == [{"c": 1, "v": "A"}]
