"""The dispatcher in ZooKeeper: an ephemeral sequential member znode, the watched assignment, the session state
handed to the engine, a liveness probe that lets the engine stop firing after a stall the session may not have
survived, and the announcement that it is leaving (a rolling restart hands its shards over first)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

import msgspec
from kazoo.exceptions import ConnectionLoss, OperationTimeoutError

from dispatcher.engine import Dispatcher
from schemas.messages import DispatcherMember, decode_assignment, encode
from tickwheel.coordination.zookeeper import NodeExistsError, SessionState, ZooKeeper

log = logging.getLogger(__name__)

MEMBERS = "/dispatchers/members"
LEAVING = "/dispatchers/leaving"
ASSIGNMENT = "/dispatchers/assignment"
LOST_REPLY = (ConnectionLoss, OperationTimeoutError)
"""A create that failed this way may still have been applied: look for the node before creating again."""
CREATE_TRIES = 5


class Membership:
    def __init__(
        self,
        zk: ZooKeeper,
        engine: Dispatcher,
        *,
        liveness_interval_s: float = 1.0,
        address: tuple[str, int] = ("", 0),
    ):
        self.zk = zk
        self.engine = engine
        self.member: str | None = None
        self.address = address
        self._interval_s = liveness_interval_s
        self._lost = False
        self._tasks: list[asyncio.Task[None]] = []
        self._registering = asyncio.Lock()

    async def start(self) -> None:
        self.zk.on_state(self._on_state)
        await self.zk.ensure_path(MEMBERS)
        await self.zk.ensure_path(LEAVING)
        await self.register()
        self.zk.watch_data(ASSIGNMENT, self._on_assignment)
        self._tasks.append(asyncio.get_running_loop().create_task(self._liveness_loop()))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def register(self) -> None:
        async with self._registering:
            data = encode(DispatcherMember(name=self.engine.name, host=self.address[0], port=self.address[1]))
            self.member = await self._create_member(data)
            self._lost = False
            log.info("registered as dispatcher member %s", self.member)
            self.engine.set_member(self.member)
            self.engine.confirm_alive()

    async def _create_member(self, data: bytes) -> str:
        """Create our ephemeral sequential znode once, even if a reply is lost (kazoo's lock recipe): its name
        starts with a fresh uuid, so after a connection loss we look for it before creating another, which
        would leave a ghost member that the coordinator assigns shards nobody fires."""
        prefix = f"m-{uuid.uuid4().hex}-"
        for attempt in range(1, CREATE_TRIES + 1):
            try:
                path: str = await self.zk.call("create", f"{MEMBERS}/{prefix}", data, ephemeral=True, sequence=True)
                return path.rsplit("/", 1)[1]
            except LOST_REPLY as exc:
                log.warning("creating the member znode lost its reply (%s); looking for it", type(exc).__name__)
                await self.zk.until_connected(timeout_s=30.0)
                found = await self._own_member(prefix)
                if found is not None:
                    return found
                if attempt == CREATE_TRIES:
                    raise
        raise AssertionError("unreachable")

    async def _own_member(self, prefix: str) -> str | None:
        children: list[str] = await self.zk.call("get_children", MEMBERS)
        return next((child for child in children if child.startswith(prefix)), None)

    async def leave(self) -> None:
        """Tell the coordinator we are leaving: it reassigns our shards while we keep firing them."""
        if self.member is None:
            return
        with contextlib.suppress(NodeExistsError):
            await self.zk.call("create", f"{LEAVING}/{self.member}", b"", ephemeral=True)
        log.info("member %s is leaving: handing its shards over", self.member)

    async def successors(self) -> int:
        """How many other dispatchers, not themselves leaving, could take our shards."""
        members: list[str] = await self.zk.call("get_children", MEMBERS)
        leaving: list[str] = await self.zk.call("get_children", LEAVING)
        return len(set(members) - set(leaving) - {self.member})

    def _on_state(self, state: SessionState) -> None:
        self.engine.on_session(state)
        if state is SessionState.LOST:
            self.member = None
            self._lost = True

    def _on_assignment(self, data: bytes | None) -> None:
        if not data:
            return
        try:
            self.engine.offer(decode_assignment(data))
        except msgspec.DecodeError:
            log.warning("unreadable shard assignment in ZooKeeper: %r", data[:200])

    async def _liveness_loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            await self.probe()

    async def probe(self) -> None:
        """Confirm our member znode still exists (the session is alive); re-register after a loss."""
        if self.zk.state is not SessionState.CONNECTED:
            return
        if self.member is None or self._lost:
            try:
                await self.register()
            except Exception as exc:
                log.warning("re-registering failed: %s", exc)
            return
        try:
            stat = await self.zk.call("exists", f"{MEMBERS}/{self.member}")
        except Exception as exc:
            log.warning("liveness probe failed: %s", exc)
            return
        if stat is None:
            log.warning("member znode %s is gone (session expired or evicted); dropping all shards", self.member)
            self.engine.drop_all()
            self.member = None
            self._lost = True
            return
        self.engine.confirm_alive()
