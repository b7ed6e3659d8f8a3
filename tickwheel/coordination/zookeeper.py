"""The ZooKeeper adapter: kazoo bridged to asyncio, with its connection state surfaced as an explicit enum.

kazoo runs its own connection thread; its async results and state callbacks are handed to the event loop here
and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from tickwheel.errors import Unavailable
from tickwheel.settings import ZooKeeperSettings

log = logging.getLogger(__name__)

__all__ = ["NoNodeError", "NodeExistsError", "SessionState", "ZooKeeper"]


class SessionState(enum.Enum):
    """What a holder of ZooKeeper-backed ownership may assume in each state."""

    CONNECTED = "connected"
    """The session is live: ephemeral nodes and leases held through it are ours."""
    SUSPENDED = "suspended"
    """Connection lost, session maybe alive: another member may take over at any moment; stop acting now."""
    LOST = "lost"
    """The session expired: every ephemeral node is gone; drop all ownership and start again."""


_FROM_KAZOO = {
    KazooState.CONNECTED: SessionState.CONNECTED,
    KazooState.SUSPENDED: SessionState.SUSPENDED,
    KazooState.LOST: SessionState.LOST,
}


def reconnect_policy(settings: ZooKeeperSettings) -> KazooRetry:
    """Reconnect forever, the wait between two rounds over the servers doubling from 0.1 s up to
    `reconnect_max_s`: a session is renewed by a new leader for its timeout only, and a client that sleeps longer
    than that after an election finds it expired (kazoo's default grows to an hour)."""
    return KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=settings.reconnect_max_s)


class ZooKeeper:
    """A kazoo client under a chroot, awaitable operations, and state listeners called on the event loop."""

    def __init__(self, settings: ZooKeeperSettings, *, chroot: str | None = None):
        self.root = chroot if chroot is not None else settings.chroot
        # Connect without the chroot, create it, then apply it: kazoo refuses to start under a missing chroot.
        self.client = KazooClient(
            hosts=settings.hosts, timeout=settings.session_timeout_s, connection_retry=reconnect_policy(settings)
        )
        self._settings = settings
        self._listeners: list[Callable[[SessionState], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.state = SessionState.LOST
        self._connected = asyncio.Event()

    async def start(self, timeout_s: float = 15.0) -> None:
        """Open the session and make the chroot if missing; Unavailable when ZooKeeper does not answer in time."""
        self._loop = asyncio.get_running_loop()
        self.client.add_listener(self._on_kazoo_state)
        try:
            await asyncio.to_thread(self.client.start, timeout_s)
            if self.root not in ("", "/"):
                await asyncio.to_thread(self.client.ensure_path, self.root)
                self.client.chroot = self.root
        except (KazooTimeoutError, KazooException) as exc:
            await asyncio.to_thread(self.client.stop)
            raise Unavailable(f"ZooKeeper at {self._settings.hosts} is unavailable: {exc}") from exc
        self.state = SessionState.CONNECTED
        self._connected.set()

    async def stop(self) -> None:
        """Close the session, so its ephemeral znodes go now rather than after the session timeout."""
        await asyncio.to_thread(self.client.stop)
        await asyncio.to_thread(self.client.close)

    @property
    def session_id(self) -> int | None:
        """The current session's id (what an ephemeral znode's `ephemeralOwner` holds); None without a session."""
        client_id = self.client.client_id
        return None if client_id is None else int(client_id[0])

    async def until_connected(self, timeout_s: float) -> bool:
        """Wait (at most `timeout_s`) for a connected session; whether it is connected."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._connected.wait(), timeout_s)
        return self.state is SessionState.CONNECTED

    def on_state(self, listener: Callable[[SessionState], None]) -> None:
        """Call `listener` on the event loop whenever the session state changes."""
        self._listeners.append(listener)

    def _on_kazoo_state(self, state: str) -> None:
        # Called on kazoo's thread: must not block, so hand over to the loop.
        mapped = _FROM_KAZOO[state]
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._set_state, mapped)

    def _set_state(self, state: SessionState) -> None:
        log.info("zookeeper session %s", state.value)
        self.state = state
        if state is SessionState.CONNECTED:
            self._connected.set()
        else:
            self._connected.clear()
        for listener in self._listeners:
            listener(state)

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run a kazoo `*_async` operation (e.g. call('create', path, b'', ephemeral=True)) without blocking."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        try:
            async_result = getattr(self.client, f"{method}_async")(*args, **kwargs)
        except KazooException as exc:
            raise Unavailable(f"ZooKeeper refused {method}: {exc}") from exc

        def settle(result: Any) -> None:
            try:
                value = result.get_nowait()
            except Exception as exc:
                loop.call_soon_threadsafe(_set_exception, done, exc)
            else:
                loop.call_soon_threadsafe(_set_result, done, value)

        async_result.rawlink(settle)
        return await done

    async def ensure_path(self, path: str) -> None:
        """Create `path` and its parents if missing (persistent znodes); one that exists is left as it is."""
        await asyncio.to_thread(self.client.ensure_path, path)

    def watch_children(self, path: str, callback: Callable[[list[str]], None]) -> None:
        """Call `callback(children)` on the event loop now and whenever the children of `path` change."""
        loop = asyncio.get_running_loop()

        def on_change(children: list[str]) -> bool:
            if not loop.is_closed():
                loop.call_soon_threadsafe(callback, sorted(children))
            return True

        self.client.ChildrenWatch(path, on_change)

    def watch_data(self, path: str, callback: Callable[[bytes | None], None]) -> None:
        """Call `callback(data)` on the event loop now and whenever the node's data changes (None: no node)."""
        loop = asyncio.get_running_loop()

        def on_change(data: bytes | None, _stat: Any) -> bool:
            if not loop.is_closed():
                loop.call_soon_threadsafe(callback, data)
            return True

        self.client.DataWatch(path, on_change)


def _set_result(done: asyncio.Future[Any], value: Any) -> None:
    if not done.done():
        done.set_result(value)


def _set_exception(done: asyncio.Future[Any], exc: BaseException) -> None:
    if not done.done():
        done.set_exception(exc)
