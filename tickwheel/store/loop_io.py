"""The driver's connections on the process's own event loop, instead of on the driver's libev thread.

With libev, every request crossed threads three times: the loop thread queued its frame and woke the I/O thread
(an `ev_async` send), armed its timer under a lock and woke it again, and the I/O thread read and decoded the
answer under the GIL, then woke the loop back (`call_soon_threadsafe`). At a few hundred runs a second those
crossings, the I/O thread's GIL hand-offs and its own loop were a fifth of a worker's CPU (BENCHMARKS.md "Where
the processes' CPU goes at 200 runs/s"). Here a connection is an asyncio protocol of the loop that awaits the
answers: the frames of a loop round leave in one write, an answer is decoded where it is awaited, a timer is the
loop's own.

The driver still calls in from its other threads (its executor opens and replaces connections and runs the
control connection's queries; its heartbeat thread sends OPTIONS; a closed connection fails its requests from
one of them), so everything that touches the transport goes through `call_soon_threadsafe` off the loop's
thread. Nothing on the loop may wait for the driver synchronously (a `Session.execute`, a `prepare` without a
thread): the answer it waits for would be read by the loop it blocks. The adapter only awaits (tickwheel/store/
cassandra.py), and does connect, prepare and shut down in threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any, cast

from cassandra.connection import Connection, ConnectionShutdown

from tickwheel.store.segments import UNCOMPRESSED_SEGMENTS

log = logging.getLogger(__name__)


def loop_connection_class(loop: asyncio.AbstractEventLoop) -> type[Connection]:
    """A driver connection class whose connections and timers live on `loop` (the running loop of the process,
    which must run on the calling thread): one class per loop, since the driver keeps its reactor per class."""
    return type("LoopConnection", (LoopConnection,), {"_loop": loop, "_loop_thread": threading.get_ident()})


class _LoopTimer:
    """A driver timer (`create_timer`): the loop's own timer, armed and cancelled on the loop's thread."""

    __slots__ = ("_cancelled", "_handle", "_loop", "_loop_thread")

    def __init__(self, loop: asyncio.AbstractEventLoop, loop_thread: int, timeout: float, callback: Callable[[], Any]):
        self._loop, self._loop_thread = loop, loop_thread
        self._cancelled = False
        self._handle: asyncio.TimerHandle | None = None
        if threading.get_ident() == loop_thread:
            self._handle = loop.call_later(timeout, callback)
        else:
            _soon(loop, self._arm, timeout, callback)

    def _arm(self, timeout: float, callback: Callable[[], Any]) -> None:
        if not self._cancelled:
            self._handle = self._loop.call_later(timeout, callback)

    def cancel(self) -> None:
        self._cancelled = True
        handle = self._handle
        if handle is None:
            return
        if threading.get_ident() == self._loop_thread:
            handle.cancel()
        else:
            _soon(self._loop, handle.cancel)


class _Protocol(asyncio.Protocol):
    """The transport's events, handed to the driver's connection."""

    def __init__(self, connection: LoopConnection):
        self._connection = connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport (uvloop's does not derive from asyncio.Transport, so no isinstance)
        self._connection._attached(cast(asyncio.Transport, transport))

    def data_received(self, data: bytes) -> None:
        connection = self._connection
        connection._iobuf.write(data)
        connection.process_io_buffer()

    def connection_lost(self, exc: Exception | None) -> None:
        connection = self._connection
        if exc is not None:
            connection.defunct(exc)
        else:
            connection.close()


class LoopConnection(Connection):  # type: ignore[misc]  # the driver is untyped
    """A driver connection served by an asyncio loop (`loop_connection_class` binds one)."""

    _loop: asyncio.AbstractEventLoop
    _loop_thread: int
    is_closed: bool

    @classmethod
    def initialize_reactor(cls) -> None:
        """Nothing to start: the loop is the process's."""

    @classmethod
    def handle_fork(cls) -> None:
        """Nothing to clean: no thread of its own."""

    @classmethod
    def create_timer(cls, timeout: float, callback: Callable[[], Any]) -> _LoopTimer:
        """A request's timeout or speculative execution, on the loop."""
        return _LoopTimer(cls._loop, cls._loop_thread, timeout, callback)

    def __init__(self, *args: Any, **kwargs: Any):
        Connection.__init__(self, *args, **kwargs)
        if self.ssl_context is not None or self.ssl_options:
            raise ConnectionShutdown("TLS connections are not served on the event loop; use cassandra.driver_io=libev")
        self._transport: asyncio.Transport | None = None
        self._unsent: list[bytes] = []  # frames pushed in this loop round, or before the transport was made
        self._connect_socket()  # blocking, in the driver's thread that asked for the connection
        self._socket.setblocking(False)
        self._on_loop(self._attach)
        self._send_options_message()

    def _enable_checksumming(self) -> None:
        """Protocol v5's segments, uncompressed ones framed by store.segments."""
        Connection._enable_checksumming(self)
        if not self.compressor:
            self._segment_codec = UNCOMPRESSED_SEGMENTS

    def _on_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        if threading.get_ident() == self._loop_thread:
            fn(*args)
        elif not _soon(self._loop, fn, *args):
            self.defunct(ConnectionShutdown("the event loop serving the connection is closed"))

    def _attach(self) -> None:
        if self.is_closed:
            self._close_transport()
            return
        made = self._loop.create_task(self._loop.create_connection(lambda: _Protocol(self), sock=self._socket))
        made.add_done_callback(self._attach_failed)

    def _attach_failed(self, made: asyncio.Task[Any]) -> None:
        if not made.cancelled() and made.exception() is not None:
            self.defunct(made.exception())

    def _attached(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        if self.is_closed:
            transport.close()
            return
        self._flush()

    def push(self, data: bytes) -> None:
        """Send a frame: written at the end of the loop's round with the round's others, handed to the loop from
        another thread."""
        self._on_loop(self._write, data)

    def _write(self, data: bytes) -> None:
        if self.is_closed:
            return
        self._unsent.append(data)
        if self._transport is not None and len(self._unsent) == 1:
            # The frames of one loop round leave in one write (the runs of a lane poll send their statements in
            # the same round): one system call and, on the node, one read for all of them.
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        if self._transport is None or self.is_closed or not self._unsent:
            return
        unsent, self._unsent = self._unsent, []
        self._transport.write(unsent[0] if len(unsent) == 1 else b"".join(unsent))

    def close(self) -> None:
        """Close the transport (on the loop) and fail what is still in flight."""
        with self.lock:
            if self.is_closed:
                return
            self.is_closed = True
        log.debug("Closing connection (%s) to %s", id(self), self.endpoint)
        if threading.get_ident() == self._loop_thread:
            self._close_transport()
        elif not _soon(self._loop, self._close_transport):
            with contextlib.suppress(OSError):
                self._socket.close()
        if not self.is_defunct:
            message = f"Connection to {self.endpoint} was closed"
            if self.last_error:
                message += f": {self.last_error}"
            self.error_all_requests(ConnectionShutdown(message))
            self.connected_event.set()

    def _close_transport(self) -> None:
        if self._transport is not None:
            self._transport.close()
        else:
            with contextlib.suppress(OSError):
                self._socket.close()


def _soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> bool:
    """`call_soon_threadsafe`; False if the loop is closed (a process shutting down)."""
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:
        return False
    return True
