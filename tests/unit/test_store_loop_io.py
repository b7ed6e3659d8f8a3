"""The driver's timers and connection class on the process's event loop (tickwheel/store/loop_io.py): armed and
cancelled on the loop's thread, from whichever thread the driver asks."""

from __future__ import annotations

import asyncio
import threading

from tickwheel.store.loop_io import LoopConnection, loop_connection_class


async def test_a_timer_made_on_the_loop_fires_on_it_and_not_once_cancelled() -> None:
    connection_class = loop_connection_class(asyncio.get_running_loop())
    fired: list[int] = []
    connection_class.create_timer(0.01, lambda: fired.append(threading.get_ident()))
    connection_class.create_timer(0.01, lambda: fired.append(-1)).cancel()
    await asyncio.sleep(0.05)
    assert fired == [threading.get_ident()]


async def test_a_timer_made_from_another_thread_is_armed_on_the_loop() -> None:
    connection_class = loop_connection_class(asyncio.get_running_loop())
    fired: list[int] = []
    await asyncio.to_thread(connection_class.create_timer, 0.01, lambda: fired.append(threading.get_ident()))
    await asyncio.sleep(0.05)
    assert fired == [threading.get_ident()]  # the loop's thread, not the one that asked


async def test_a_timer_cancelled_from_another_thread_does_not_fire() -> None:
    connection_class = loop_connection_class(asyncio.get_running_loop())
    fired: list[str] = []
    early = connection_class.create_timer(0.05, lambda: fired.append("armed here"))

    def made_and_cancelled_there() -> None:
        connection_class.create_timer(0.05, lambda: fired.append("armed there")).cancel()
        early.cancel()

    await asyncio.to_thread(made_and_cancelled_there)
    await asyncio.sleep(0.1)
    assert fired == []


async def test_each_loop_gets_a_connection_class_of_its_own() -> None:
    here = loop_connection_class(asyncio.get_running_loop())
    other_loop = asyncio.new_event_loop()
    try:
        there = await asyncio.to_thread(lambda: loop_connection_class(other_loop))
    finally:
        other_loop.close()
    assert issubclass(here, LoopConnection) and issubclass(there, LoopConnection)
    assert here is not there
    assert here._loop is asyncio.get_running_loop() and there._loop is other_loop
    assert here._loop_thread == threading.get_ident() != there._loop_thread
