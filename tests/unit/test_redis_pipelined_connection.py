"""The scripts' pipelined Redis connection against a scripted stand-in server: answers matched to their pipelines in
order, however the bytes arrive; set-up commands; errors, timeouts and lost connections failing exactly the pipelines
waiting. (Against the real Redis: tests/integration/test_adapters.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import SimpleNamespace

import hiredis
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from tickwheel.flow.redis import REDIS_DOWN, PipelinedConnection, ScriptBatcher, pack

Answer = Callable[[list[bytes]], bytes | None]  # a command -> the bytes to answer (None: no answer at all)


class StandIn:
    """A TCP server speaking just enough RESP: records every command and answers it with `answer`."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.commands: list[list[bytes]] = []
        self.writers: list[asyncio.StreamWriter] = []
        self.chunk: int | None = None  # answer in pieces of this many bytes, each written on its own

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        parser = hiredis.Reader()
        while data := await reader.read(65536):
            parser.feed(data)
            while (command := parser.gets()) is not False:
                self.commands.append(command)
                answer = self.answer(command)
                if answer is None:
                    continue
                pieces = [answer] if self.chunk is None else [
                    answer[i : i + self.chunk] for i in range(0, len(answer), self.chunk)
                ]  # fmt: skip
                for piece in pieces:
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0)
        writer.close()

    def drop_connections(self) -> None:
        for writer in self.writers:
            writer.close()


@asynccontextmanager
async def stand_in(answer: Answer) -> AsyncIterator[tuple[StandIn, int]]:
    server = StandIn(answer)
    listening = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    try:
        yield server, port
    finally:
        server.drop_connections()
        listening.close()


class Scripts:
    """What the batcher asks of redis-py when a pipelined connection sends: a script's SHA."""

    def register_script(self, source: str) -> SimpleNamespace:
        return SimpleNamespace(sha="0" * 40)


def echo(command: list[bytes]) -> bytes:
    """EVALSHA sha numkeys key value -> the value as an integer; AUTH/SELECT -> +OK."""
    if command[0] in (b"AUTH", b"SELECT"):
        return b"+OK\r\n"
    return b":%d\r\n" % int(command[-1])


def evalsha(value: int) -> bytes:
    return pack("EVALSHA", "0" * 40, 1, "k", value)


def test_a_url_names_host_port_database_and_credentials() -> None:
    plain = PipelinedConnection.for_url("redis://cache.internal:6380/3")
    assert plain is not None
    assert (plain.host, plain.port, plain.db, plain.username, plain.password, plain.tls) == (
        "cache.internal", 6380, 3, None, None, False,
    )  # fmt: skip
    secure = PipelinedConnection.for_url("rediss://tw:p%40ss@cache.internal")
    assert secure is not None
    assert (secure.port, secure.db, secure.username, secure.password, secure.tls) == (6379, 0, "tw", "p@ss", True)
    password_only = PipelinedConnection.for_url("redis://:secret@127.0.0.1:16379/0")
    assert password_only is not None and (password_only.username, password_only.password) == (None, "secret")


@pytest.mark.parametrize("url", ["unix:///run/redis.sock", "redis://127.0.0.1:6379/0?ssl_cert_reqs=none"])
def test_what_it_does_not_handle_goes_through_redis_py(url: str) -> None:
    assert PipelinedConnection.for_url(url) is None


async def test_pipelines_in_flight_get_their_own_answers_however_the_bytes_arrive() -> None:
    async with stand_in(echo) as (server, port):
        server.chunk = 1  # every answer byte by byte: the parser must wait for whole answers
        connection = PipelinedConnection("127.0.0.1", port)
        pipelines = [[evalsha(10 * p + i) for i in range(p + 1)] for p in range(5)]
        answers = await asyncio.gather(*(connection.execute(commands) for commands in pipelines))
        connection.close()
    assert answers == [[10 * p + i for i in range(p + 1)] for p in range(5)]


async def test_the_connection_authenticates_and_selects_its_database_first() -> None:
    async with stand_in(echo) as (server, port):
        connection = PipelinedConnection("127.0.0.1", port, db=2, username="tw", password="secret")
        assert await connection.execute([evalsha(7)]) == [7]
        assert await connection.execute([evalsha(8)]) == [8]  # the same connection: set up once
        connection.close()
    assert server.commands[:2] == [[b"AUTH", b"tw", b"secret"], [b"SELECT", b"2"]]
    assert len(server.commands) == 4


async def test_a_refused_authentication_fails_the_call_as_redis_down() -> None:
    async with stand_in(lambda c: b"-WRONGPASS invalid password\r\n" if c[0] == b"AUTH" else echo(c)) as (_, port):
        connection = PipelinedConnection("127.0.0.1", port, password="wrong")
        with pytest.raises(RedisConnectionError, match="WRONGPASS"):
            await connection.execute([evalsha(1)])


async def test_error_answers_come_back_as_redis_py_exceptions_in_their_place() -> None:
    def answer(command: list[bytes]) -> bytes:
        value = int(command[-1])
        if value == 1:
            return b"-NOSCRIPT No matching script. Please use EVAL.\r\n"
        if value == 2:
            return b"-ERR Error running script\r\n"
        return echo(command)

    async with stand_in(answer) as (_, port):
        connection = PipelinedConnection("127.0.0.1", port)
        first, second, third = await connection.execute([evalsha(1), evalsha(2), evalsha(3)])
        connection.close()
    assert isinstance(first, NoScriptError) and str(first) == "No matching script. Please use EVAL."
    assert isinstance(second, ResponseError) and not isinstance(second, NoScriptError)
    assert third == 3


async def test_a_silent_server_fails_the_waiting_pipelines_with_a_timeout_and_the_next_call_reconnects() -> None:
    silent = True

    def answer(command: list[bytes]) -> bytes | None:
        return None if silent else echo(command)

    async with stand_in(answer) as (server, port):
        connection = PipelinedConnection("127.0.0.1", port, timeout_s=0.2)
        started = asyncio.get_running_loop().time()
        waiting = [asyncio.ensure_future(connection.execute([evalsha(i)])) for i in range(3)]
        done = await asyncio.gather(*waiting, return_exceptions=True)
        assert all(isinstance(e, RedisTimeoutError) and isinstance(e, REDIS_DOWN) for e in done)
        assert 0.19 <= asyncio.get_running_loop().time() - started < 1.0
        silent = False
        assert await connection.execute([evalsha(4)]) == [4]
        connection.close()
    assert len(server.writers) == 2  # a new connection, not more writes on the one that timed out


async def test_a_connection_lost_mid_pipeline_fails_only_what_was_waiting_on_it() -> None:
    drop = True

    def answer(command: list[bytes]) -> bytes | None:
        if drop and int(command[-1]) == 2:
            server.drop_connections()
            return None
        return echo(command)

    async with stand_in(answer) as (server, port):
        connection = PipelinedConnection("127.0.0.1", port)
        assert await connection.execute([evalsha(1)]) == [1]
        with pytest.raises(RedisConnectionError, match="lost"):
            await connection.execute([evalsha(2), evalsha(3)])
        drop = False
        assert await connection.execute([evalsha(5)]) == [5]
        connection.close()


async def test_an_answer_out_of_protocol_fails_the_connection() -> None:
    async with stand_in(lambda c: b"?garbage\r\n") as (_, port):
        connection = PipelinedConnection("127.0.0.1", port)
        with pytest.raises(RedisConnectionError, match="out of protocol"):
            await connection.execute([evalsha(1)])


async def test_a_closed_port_is_redis_down() -> None:
    listening = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    listening.close()
    await listening.wait_closed()
    with pytest.raises(REDIS_DOWN):
        await PipelinedConnection("127.0.0.1", port).execute([evalsha(1)])


async def test_a_cancelled_caller_does_not_shift_the_answers_of_the_next() -> None:
    async with stand_in(echo) as (server, port):
        connection = PipelinedConnection("127.0.0.1", port)
        assert await connection.execute([evalsha(0)]) == [0]  # connected
        server.chunk = 1
        first = asyncio.ensure_future(connection.execute([evalsha(11), evalsha(12)]))
        await asyncio.sleep(0)
        first.cancel()
        assert await connection.execute([evalsha(13)]) == [13]
        connection.close()
    assert first.cancelled()


async def test_the_batcher_sends_a_round_of_script_calls_as_one_pipeline_on_the_connection() -> None:
    async with stand_in(echo) as (server, port):
        batcher = ScriptBatcher(Scripts(), PipelinedConnection("127.0.0.1", port))  # type: ignore[arg-type]
        answers = await asyncio.gather(*(batcher.call("return ARGV[1]", ["k"], [i]) for i in range(4)))
        batcher.close()
    assert answers == [0, 1, 2, 3]
    assert [c[0] for c in server.commands] == [b"EVALSHA"] * 4
    assert [c[3:] for c in server.commands] == [[b"k", str(i).encode()] for i in range(4)]
