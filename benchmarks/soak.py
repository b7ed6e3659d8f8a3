"""Nemesis soak: a steady mix of work on a stack while a seeded nemesis breaks one thing at a time, then the
checker's table per fault window (lost, duplicate calls, early, start lag, not final, API errors).

The platform is api, coordinator, two dispatchers and two workers as real processes on the stack in
`--stack-dir` (the cluster of `tickwheel stack up --nodes 3`, or a single node for the baseline), in a namespace
of its own (keyspace, topic prefix, ZooKeeper chroot, Redis prefix, free ports). The load generator, through the
public API only, keeps creating: one-off runs due 5-20 s ahead (a quarter of them call a target that takes
1.5 s, so calls are in flight when a worker dies), runs whose target always answers 500 (three attempts, then
the dead-letter queue), runs whose target is a Kafka topic, and, at the start, minutely crons in six time
zones; it also reads a job back twice a second. Every request it makes is recorded (a 5xx or no answer is an
API error: the promise is that no tenant request fails while one node is down). The sink records every HTTP
call; the tenant topics are read back for the Kafka calls.

The nemesis (seeded: `--seed`) waits a warm-up, then runs each fault in `--faults` once, in a seeded order,
with a quiet gap between them. A fault's window runs from its injection until `--settle-s` after it healed:

    kill-dispatcher     SIGKILL a dispatcher, restart it 5 s later
    pause-dispatcher    SIGSTOP a dispatcher past its ZooKeeper session timeout (+5 s), then SIGCONT
    kill-worker         SIGKILL a worker while a slow call is in flight, restart it 3 s later
    cassandra           stop one Cassandra node (SIGTERM), restart it after --down-s
    kafka               stop the broker leading partition 0 of the default lane, restart it after --down-s
    zookeeper           stop the ZooKeeper leader, restart it after --down-s
    redis               stop Redis for 30 s
    pause-coordinator   SIGSTOP the coordinator for 30 s, then SIGCONT

    .venv/bin/python -m benchmarks.soak --stack-dir .stack-cluster --minutes 10 --seed 1 --out /tmp/soak-cluster.md
    .venv/bin/python -m benchmarks.soak --stack-dir .stack-single --minutes 10 --seed 1 --out /tmp/soak-single.md

On a single-node stack the server faults stop the only node: the baseline shows what the cluster buys.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks.private_platform import RAISED_LIMITS, free_port
from schemas.messages import topic_names
from tickwheel.core.ids import run_id_for
from tickwheel.core.targets import default_topic_prefix
from tickwheel.dev import stack
from tickwheel.dev.checker import TABLE_HEADER, ApiRequest, Call, Expected, Window, WindowReport, check_windows
from tickwheel.dev.platform import ready
from tickwheel.dev.sink import Sink
from tickwheel.settings import Settings
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.runs import due_states
from tickwheel.store.tenants import create_tenant

ROOT = Path(__file__).resolve().parents[1]
FAULTS = (
    "kill-dispatcher",
    "pause-dispatcher",
    "kill-worker",
    "cassandra",
    "kafka",
    "zookeeper",
    "redis",
    "pause-coordinator",
)
CRON_ZONES = ("UTC", "Asia/Kolkata", "Asia/Kathmandu", "America/New_York", "Australia/Adelaide", "Europe/Paris")
RUN_ID_HEADER = "X-Tickwheel-Run-Id"


def utc(unix_s: float) -> datetime:
    return datetime.fromtimestamp(unix_s, UTC)


# --- the platform ------------------------------------------------------------------------------------------


@dataclass
class Proc:
    """One platform process the nemesis may kill, pause and restart."""

    kind: str  # api, coordinator, dispatcher, worker
    name: str  # dispatcher-1, ...
    env: dict[str, str]
    port: int
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "tickwheel.cli", self.kind],
                cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    async def wait_ready(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not await asyncio.to_thread(ready, self.port):
            if self.popen is None or self.popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not become ready; see {self.log}")
            await asyncio.sleep(0.3)

    def signal(self, sig: signal.Signals) -> None:
        assert self.popen is not None
        self.popen.send_signal(sig)

    async def stop(self) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGCONT)  # a paused process cannot handle SIGTERM
        self.popen.terminate()
        try:
            await asyncio.to_thread(self.popen.wait, 30)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            await asyncio.to_thread(self.popen.wait)


def owned_shards(port: int) -> int:
    """The shards a dispatcher owns, from its /metrics (`tickwheel_owned_shards`); 0 if it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            text = answer.read().decode()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("tickwheel_owned_shards "):
            return int(float(line.split()[1]))
    return 0


async def wait_warm(load: Load, rounds: int = 3, max_lag_s: float = 1.0, timeout_s: float = 300.0) -> int:
    """Canary rounds until `rounds` in a row are all called within `max_lag_s` of their due time; returns the rounds
    run. Ready processes on a fresh cluster still start slowly (Cassandra's JIT and caches are cold: LWTs timed out
    for a minute after the first acquisition); the soak measures the platform once warm and reports how long this
    took. The canary's requests are not counted as the load's."""
    deadline, run, passed = time.monotonic() + timeout_s, 0, 0
    while passed < rounds:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the platform did not warm up within {timeout_s:.0f} s ({run} canary rounds)")
        lag = await load.canary_round()
        run += 1
        passed = passed + 1 if lag is not None and lag <= max_lag_s else 0
    load.requests.clear()
    return run


async def wait_platform_ready(procs: dict[str, Proc], shards: int, timeout_s: float = 300.0) -> float:
    """Until every process answers /readyz in the same pass and the dispatchers' shards add up to all of them;
    returns the seconds waited. A dispatcher is ready once it has read the horizon of every shard it owns: on a
    freshly started cluster that took 30-70 s after it first answered, and the runs due meanwhile were called
    20-40 s late (run 5's steady p99 of 29.8 s came from the first 20 s of load)."""
    began = time.monotonic()
    dispatchers = [p for p in procs.values() if p.kind == "dispatcher"]
    while True:
        answers = await asyncio.gather(*(asyncio.to_thread(ready, p.port) for p in procs.values()))
        if all(answers):
            owned = await asyncio.gather(*(asyncio.to_thread(owned_shards, p.port) for p in dispatchers))
            if sum(owned) == shards and all(owned):
                return time.monotonic() - began
        if time.monotonic() - began > timeout_s:
            raise RuntimeError(f"the platform was not ready within {timeout_s:.0f} s")
        await asyncio.sleep(0.5)


def soak_settings(base: Settings, tag: str) -> Settings:
    """The soak's own namespace on the servers of `base`."""
    return dataclasses.replace(
        base,
        cassandra=dataclasses.replace(base.cassandra, keyspace=f"tw_soak_{tag}"),
        kafka=dataclasses.replace(base.kafka, topic_prefix=f"soak.{tag}.", lane_partitions=4, near_partitions=8),
        zookeeper=dataclasses.replace(base.zookeeper, chroot=f"/tw-soak-{tag}"),
        redis=dataclasses.replace(base.redis, key_prefix=f"soak:{tag}:"),
    )


def process_env(s: Settings, port_key: str, port: int) -> dict[str, str]:
    """Exactly these settings (no env file, no stray key), the raised limits and the process's own port."""
    return {**s.process_env(), **RAISED_LIMITS, port_key: str(port)}


def make_platform(s: Settings, logs: Path) -> dict[str, Proc]:
    procs = {}
    for kind, count in (("api", 1), ("coordinator", 1), ("dispatcher", 2), ("worker", 2)):
        for i in range(1, count + 1):
            name = kind if count == 1 else f"{kind}-{i}"
            port = free_port()
            env = process_env(s, f"TICKWHEEL_{kind.upper()}_PORT", port)
            procs[name] = Proc(kind, name, env, port, logs / f"{name}.log")
    return procs


# --- the load generator ------------------------------------------------------------------------------------


@dataclass
class Tenant:
    tenant_id: str
    key: str


RETRY_BASE_S = 0.5
RETRY_CAP_S = 8.0


def retry_pause_s(attempt: int, retry_after: str | None, jitter: random.Random) -> float:
    """How long to wait before try `attempt + 1`: the server's Retry-After (seconds) when it gave one, else full
    jitter over an exponential back-off from RETRY_BASE_S, capped at RETRY_CAP_S."""
    if retry_after is not None and retry_after.strip().isdigit():
        return min(float(retry_after), RETRY_CAP_S) * (1.0 + 0.2 * jitter.random())
    return jitter.uniform(0.0, min(RETRY_CAP_S, RETRY_BASE_S * 2**attempt))


@dataclass
class Load:
    """The load generator's record: what it was promised and every request it made."""

    api: str
    sink: Sink
    tenants: list[Tenant]
    rng: random.Random
    expected: list[Expected] = field(default_factory=list)
    keys: dict[uuid.UUID, str] = field(default_factory=dict)  # run id -> the API key that may read it
    requests: list[ApiRequest] = field(default_factory=list)
    crons: list[tuple[uuid.UUID, datetime, Tenant]] = field(default_factory=list)  # job, first run, tenant
    kafka_topics: list[str] = field(default_factory=list)
    http: aiohttp.ClientSession | None = None
    # The back-off's own generator, so retries do not shift the seeded choices of what the load creates.
    jitter: random.Random = field(default_factory=random.Random)

    async def call(self, method: str, path: str, tenant: Tenant, body: Any = None, give_up_s: float = 120.0) -> Any:
        """One API request, retried with the same Idempotency-Key while it fails (every failure is recorded).

        Between tries it waits what the answer's Retry-After asks, else a jittered exponential back-off: a client
        that retries every second without backing off kept an overloaded API overloaded (run 10)."""
        assert self.http is not None
        headers = {"Authorization": f"Bearer {tenant.key}"}
        if method != "GET":
            headers["Idempotency-Key"] = str(uuid.uuid4())
        give_up_at = time.monotonic() + give_up_s
        attempt = 0
        while True:
            at = datetime.now(UTC)
            retry_after: str | None = None
            try:
                async with self.http.request(method, f"{self.api}{path}", json=body, headers=headers) as answer:
                    document = await answer.json(content_type=None)
                    # Every request here is valid: any answer but 2xx, 404 (a run read before it exists) and 409 (an
                    # earlier try of this key, timed out here, still running) is a failure the tenant sees.
                    failed = answer.status >= 400 and answer.status not in (404, 409)
                    self.requests.append(ApiRequest(at, failed, f"{method} {path} {answer.status}"))
                    if answer.status < 500 and answer.status != 409:
                        return answer.status, document
                    retry_after = answer.headers.get("Retry-After")
            except (aiohttp.ClientError, TimeoutError) as exc:
                self.requests.append(ApiRequest(at, True, f"{method} {path} {type(exc).__name__}"))
            attempt += 1
            pause = retry_pause_s(attempt, retry_after, self.jitter)
            if time.monotonic() + pause > give_up_at:
                return 599, None
            await asyncio.sleep(pause)

    async def create(self, tenant: Tenant, body: dict[str, Any], succeeds: bool = True) -> None:
        first_sent = datetime.now(UTC)
        status, job = await self.call("POST", "/v1/jobs", tenant, body)
        if status != 201:
            print(f"load: a create was refused ({status}): {job}", flush=True)
            return
        if body["schedule"]["type"] == "cron":
            self.crons.append((uuid.UUID(job["id"]), datetime.fromisoformat(job["next_run_at"]), tenant))
            return
        run_id = uuid.UUID(job["next_run_id"])
        # A create retried through a fault may be accepted after its runAt: it is due no earlier than its first
        # try was sent (the server may have written it then, before a reply that timed out), so a call is early
        # only if it precedes both; its lag includes the time the API took to accept it.
        due_at = max(datetime.fromisoformat(job["next_run_at"]), first_sent)
        self.expected.append(Expected(run_id, tenant.tenant_id, due_at, succeeds))
        self.keys[run_id] = tenant.key

    def once(self, target: dict[str, Any], lead_s: float, **extra: Any) -> dict[str, Any]:
        at = datetime.now(UTC) + timedelta(seconds=lead_s)
        run_at = at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        return {"schedule": {"type": "once", "runAt": run_at}, "target": target, "payload": {"soak": True}, **extra}

    def http_target(self, path: str, **instructions: Any) -> dict[str, Any]:
        return {"type": "http", "url": self.sink.url(path, **instructions), "method": "POST"}

    async def every(self, period_s: float, until: float, make: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Start `make()` every `period_s` until `until` (monotonic), without waiting for the previous one."""
        tasks: set[asyncio.Task[None]] = set()
        next_at = time.monotonic()
        while next_at < until:
            task = asyncio.create_task(make())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            next_at += period_s
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        await asyncio.gather(*tasks)

    async def one_off(self) -> None:
        tenant = self.rng.choice(self.tenants)
        slow = self.rng.random() < 0.25
        path = f"/slow/{tenant.tenant_id}" if slow else f"/ok/{tenant.tenant_id}"
        target = self.http_target(path, delay_ms=1500) if slow else self.http_target(path)
        await self.create(tenant, self.once(target, self.rng.uniform(5, 20)))

    async def failing(self) -> None:
        tenant = self.rng.choice(self.tenants)
        policy = {"maxAttempts": 3, "baseDelayS": 1, "maxDelayS": 4, "jitter": 0}
        body = self.once(self.http_target(f"/fail/{tenant.tenant_id}", status=500), 10, retryPolicy=policy)
        await self.create(tenant, body, succeeds=False)

    async def to_kafka(self) -> None:
        tenant = self.rng.choice(self.tenants)
        topic = f"{default_topic_prefix(tenant.tenant_id)}soak"
        await self.create(tenant, self.once({"type": "kafka", "topic": topic}, self.rng.uniform(5, 20)))

    async def read_back(self) -> None:
        if self.expected:
            tenant = self.tenants[0]
            await self.call("GET", "/v1/jobs?limit=1", tenant, give_up_s=0.0)

    async def canary_round(self, count: int = 5, lead_s: float = 2.0, wait_s: float = 15.0) -> float | None:
        """One round of the canary: `count` one-off runs due `lead_s` ahead, created through the API and sent to
        the sink (path /canary/..., left out of the history); the worst start lag, or None if one was not called
        within `wait_s` of its due time."""
        tag = uuid.uuid4().hex[:8]
        due: dict[str, float] = {}
        for i in range(count):
            tenant = self.tenants[i % len(self.tenants)]
            body = self.once(self.http_target(f"/canary/{tag}"), lead_s)
            status, job = await self.call("POST", "/v1/jobs", tenant, body)
            if status != 201:
                return None
            due[job["next_run_id"]] = datetime.fromisoformat(job["next_run_at"]).timestamp()
        deadline = max(due.values()) + wait_s
        while time.time() < deadline:
            called = {c.header(RUN_ID_HEADER): c.received_at for c in self.sink.arrivals if c.path == f"/canary/{tag}"}
            if set(due) <= set(called):
                return max(called[r] - at for r, at in due.items())
            await asyncio.sleep(0.2)
        return None

    async def start_crons(self) -> None:
        for i, zone in enumerate(CRON_ZONES):
            tenant = self.tenants[i % len(self.tenants)]
            body = {
                "schedule": {"type": "cron", "expr": "* * * * *", "tz": zone},
                "target": self.http_target(f"/cron/{tenant.tenant_id}"),
                "name": f"soak-cron-{zone.replace('/', '-')}",
            }
            await self.create(tenant, body)

    def cron_runs(self, until: datetime) -> list[Expected]:
        """Every minute of each cron from its first run to `until` (the run id is the job's and the minute's)."""
        runs = []
        for job_id, first, tenant in self.crons:
            at = first
            while at <= until:
                run_id = run_id_for(job_id, at)
                runs.append(Expected(run_id, tenant.tenant_id, at))
                self.keys[run_id] = tenant.key
                at += timedelta(minutes=1)
        return runs


# --- the nemesis -------------------------------------------------------------------------------------------


@dataclass
class Nemesis:
    stack_dir: Path
    procs: dict[str, Proc]
    load: Load
    rng: random.Random
    settings: Settings
    down_s: float
    log: list[str] = field(default_factory=list)

    def say(self, line: str) -> None:
        stamped = f"{datetime.now(UTC):%H:%M:%S} {line}"
        self.log.append(stamped)
        print(f"nemesis: {stamped}", flush=True)

    async def run(self, fault: str) -> str:
        """Inject `fault` and heal it; returns what was done (the window's name)."""
        action: Callable[[], Awaitable[str]] = getattr(self, fault.replace("-", "_"))
        return await action()

    async def _restart(self, proc: Proc) -> None:
        proc.start()
        await proc.wait_ready()

    async def kill_dispatcher(self) -> str:
        proc = self.procs[self.rng.choice(["dispatcher-1", "dispatcher-2"])]
        proc.signal(signal.SIGKILL)
        self.say(f"SIGKILL {proc.name}")
        await asyncio.sleep(5)
        await self._restart(proc)
        return f"SIGKILL {proc.name}"

    async def pause_dispatcher(self) -> str:
        proc = self.procs[self.rng.choice(["dispatcher-1", "dispatcher-2"])]
        pause_s = self.settings.zookeeper.session_timeout_s + 5
        proc.signal(signal.SIGSTOP)
        self.say(f"SIGSTOP {proc.name} for {pause_s:.0f} s")
        await asyncio.sleep(pause_s)
        proc.signal(signal.SIGCONT)
        return f"SIGSTOP {proc.name} {pause_s:.0f} s"

    async def kill_worker(self) -> str:
        proc = self.procs[self.rng.choice(["worker-1", "worker-2"])]
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not self._slow_call_in_flight():  # noqa: ASYNC110 - polls the sink
            await asyncio.sleep(0.05)
        proc.signal(signal.SIGKILL)
        self.say(f"SIGKILL {proc.name} (a slow call in flight: {self._slow_call_in_flight()})")
        await asyncio.sleep(3)
        await self._restart(proc)
        return f"SIGKILL {proc.name} mid-call"

    def _slow_call_in_flight(self) -> bool:
        sink = self.load.sink
        arrived = sum(c.path.startswith("/slow/") for c in sink.arrivals)
        return arrived > sum(c.path.startswith("/slow/") for c in sink.calls)

    async def _bounce(self, name: str, down_s: float) -> None:
        self.say(f"stop {name}")
        await asyncio.to_thread(stack.stop_server, self.stack_dir, name)
        await asyncio.sleep(down_s)
        self.say(f"start {name}")
        # In a process of its own: the probes' driver timeouts must not depend on this busy event loop's GIL.
        restart = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tickwheel.dev.stack", "up", "--dir", str(self.stack_dir), "--only", name,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        output, _ = await restart.communicate()
        if restart.returncode != 0:
            raise RuntimeError(f"{name} did not come back: {output.decode()[-500:]}")
        self.say(f"{name} answers again")

    def _nodes(self, kind: str) -> list[str]:
        return [n for n in stack.specs_of(self.stack_dir) if stack.kind_of(n) == kind]

    async def cassandra(self) -> str:
        node = self.rng.choice(self._nodes("cassandra"))
        await self._bounce(node, self.down_s)
        return f"stop {node} {self.down_s:.0f} s"

    async def kafka(self) -> str:
        node = await asyncio.to_thread(self._kafka_leader) or self.rng.choice(self._nodes("kafka"))
        await self._bounce(node, self.down_s)
        return f"stop {node} (leader) {self.down_s:.0f} s"

    def _kafka_leader(self) -> str | None:
        """The node leading partition 0 of the default lane topic (node.id n is kafka-n in a cluster)."""
        from confluent_kafka.admin import AdminClient

        topic = topic_names(self.settings.kafka.topic_prefix)["default"]
        try:
            metadata = AdminClient({"bootstrap.servers": self.settings.kafka.bootstrap}).list_topics(topic, timeout=5)
            leader = metadata.topics[topic].partitions[0].leader
        except Exception:  # no answer or no such partition: pick at random instead
            return None
        name = f"kafka-{leader}"
        return name if name in self._nodes("kafka") else None

    async def zookeeper(self) -> str:
        node = await asyncio.to_thread(self._zookeeper_leader) or self.rng.choice(self._nodes("zookeeper"))
        await self._bounce(node, self.down_s)
        return f"stop {node} {self.down_s:.0f} s"

    def _zookeeper_leader(self) -> str | None:
        from tickwheel.settings import host_port

        specs = stack.specs_of(self.stack_dir)
        for name in self._nodes("zookeeper"):
            host, port = host_port(specs[name].endpoint, 2181)
            try:
                with socket.create_connection((host, port), timeout=2) as conn:
                    conn.sendall(b"srvr")
                    answer = conn.recv(4096).decode(errors="replace")
            except OSError:
                continue
            if "Mode: leader" in answer or "Mode: standalone" in answer:
                return name
        return None

    async def redis(self) -> str:
        await self._bounce(self._nodes("redis")[0], 30)
        return "stop redis 30 s"

    async def pause_coordinator(self) -> str:
        proc = self.procs["coordinator"]
        proc.signal(signal.SIGSTOP)
        self.say("SIGSTOP coordinator for 30 s")
        await asyncio.sleep(30)
        proc.signal(signal.SIGCONT)
        return "SIGSTOP coordinator 30 s"


async def nemesis_loop(
    nemesis: Nemesis,
    faults: list[str],
    warmup_s: float,
    gap_s: float,
    settle_s: float,
    until: float,
    rng: random.Random,
    repeat: bool,
) -> list[Window]:
    """Each fault once in `faults`' order; with `repeat`, again in a fresh seeded order until the time is up."""
    windows: list[Window] = []
    await asyncio.sleep(warmup_s)
    order = list(faults)
    while True:
        for fault in order:
            if time.monotonic() > until - settle_s:
                nemesis.say(f"no time left for {fault}")
                return windows
            start = datetime.now(UTC)
            try:
                name = await nemesis.run(fault)
            except Exception as exc:  # a heal that failed is a finding: report it in the window, go on
                nemesis.say(f"{fault}: {exc!r}")
                name = f"{fault} (heal failed)"
            windows.append(Window(name, start, datetime.now(UTC) + timedelta(seconds=settle_s), fault))
            await asyncio.sleep(settle_s + gap_s)
        if not repeat:
            return windows
        order = list(faults)
        rng.shuffle(order)


# --- reading the history back ------------------------------------------------------------------------------


def sink_calls(sink: Sink) -> list[Call]:
    calls = []
    for c in sink.calls:
        run_id = c.header(RUN_ID_HEADER)
        parts = c.path.split("/")
        if run_id is None or len(parts) < 3 or parts[1] == "canary":
            continue
        status = c.status if c.status is not None else 0
        calls.append(Call(uuid.UUID(run_id), parts[2], utc(c.received_at), status, signature_valid=True))
    return calls


def kafka_calls(settings: Settings, topics: list[str], tenant_of: dict[str, str]) -> list[Call]:
    """Every message on the tenants' topics as a call (time: the worker's produce time)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": settings.kafka.bootstrap, "group.id": f"soak-{uuid.uuid4().hex}",
         "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    )  # fmt: skip
    calls = []
    try:
        consumer.assign([TopicPartition(t, 0, 0) for t in topics])
        idle = 0
        while idle < 5:
            message = consumer.poll(1.0)
            if message is None or message.error():
                idle += 1
                continue
            idle = 0
            pairs: list[tuple[str, bytes]] = message.headers() or []  # type: ignore[assignment]
            headers = {k.lower(): (v or b"").decode() for k, v in pairs}
            run_id = headers.get(RUN_ID_HEADER.lower())
            if run_id is not None:
                at = message.timestamp()[1] / 1000
                calls.append(Call(uuid.UUID(run_id), tenant_of[str(message.topic())], utc(at), 200, True))
    finally:
        consumer.close()
    return calls


async def final_statuses(store: CassandraStore, runs: list[Expected]) -> dict[uuid.UUID, str]:
    """Each run's status, read from the store in `run_id IN` groups: the checker's reads are not the tenants' load,
    so they neither count as API requests nor spend the tenants' request rate (read one by one through the API,
    a soak of 15,800 runs met the tenants' 200 requests/s limit and recorded 429s as failures)."""
    states = await due_states(store, [run.run_id for run in runs])
    return {run_id: state.status.value for run_id, state in states.items()}


# --- the soak ----------------------------------------------------------------------------------------------


async def soak(args: argparse.Namespace, base: Settings | None = None) -> list[WindowReport]:
    """Run the soak on the stack in `args.stack_dir` (its servers: `base`, else its env file); the table's rows."""
    stack_dir: Path = args.stack_dir
    rng = random.Random(args.seed)
    tag = uuid.uuid4().hex[:6]
    settings = soak_settings(base or Settings.from_env({}, env_file=stack_dir / "env"), tag)
    logs = Path(tempfile.mkdtemp(prefix=f"soak-{stack_dir.name}-"))
    print(f"soak {tag} on {stack_dir} ({settings.cassandra.hosts}), logs in {logs}", flush=True)
    from tickwheel.bus.kafka import ensure_topics
    from tickwheel.commands import run_migrate

    await run_migrate(settings)
    store = await CassandraStore.connect(settings.cassandra)
    tenants = []
    for i in range(3):
        tenant, key = await create_tenant(store, f"soak-{tag}-{i}", datetime.now(UTC))
        tenants.append(Tenant(tenant.tenant_id, key))
    topics = {f"{default_topic_prefix(t.tenant_id)}soak": t.tenant_id for t in tenants}
    await ensure_topics(settings.kafka, dict.fromkeys(topics, 1))

    procs = make_platform(settings, logs)
    sink = await Sink().start()
    load = Load(f"http://127.0.0.1:{procs['api'].port}", sink, tenants, random.Random(args.seed + 1))
    load.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15))
    faults = [f for f in FAULTS if f in args.faults]
    rng.shuffle(faults)
    nemesis = Nemesis(stack_dir, procs, load, rng, settings, args.down_s)
    try:
        for proc in procs.values():
            proc.start()
        for proc in procs.values():
            await proc.wait_ready()
        waited_s = await wait_platform_ready(procs, settings.shards)
        print(f"every shard owned and read {waited_s:.1f} s after every process first answered", flush=True)
        began = time.monotonic()
        rounds = await wait_warm(load, rounds=getattr(args, "canary_rounds", 3))
        print(
            f"platform ready and warm ({rounds} canary rounds, {time.monotonic() - began:.0f} s); "
            f"faults in order: {', '.join(faults)}; load average {loadavg()}",
            flush=True,
        )
        started = datetime.now(UTC)
        until = time.monotonic() + args.minutes * 60
        await load.start_crons()
        windows, *_ = await asyncio.gather(
            nemesis_loop(nemesis, faults, args.warmup_s, args.gap_s, args.settle_s, until, rng, args.repeat),
            load.every(1 / args.rate, until, load.one_off),
            load.every(10, until, load.failing),
            load.every(5, until, load.to_kafka),
            load.every(0.5, until, load.read_back),
        )
        load_end = datetime.now(UTC)
        print(f"load done; load average {loadavg()}; draining", flush=True)
        expected = load.expected + load.cron_runs(until=load_end)
        last_due = max((e.due_at for e in expected), default=load_end)
        await asyncio.sleep(max(0.0, (last_due - datetime.now(UTC)).total_seconds()) + args.drain_s)
        calls = sink_calls(sink) + await asyncio.to_thread(kafka_calls, settings, list(topics), topics)
        finals = await final_statuses(store, [e for e in expected if e.due_at <= load_end])
    finally:
        await load.http.close()
        for proc in procs.values():
            await proc.stop()
        await sink.stop()
        try:  # the servers' heap; a failure here must not lose the history (a schema disagreement after a node's
            # restart once answered "Unknown CF" and the soak ended without its report)
            await store.execute_raw(f"DROP KEYSPACE IF EXISTS {settings.cassandra.keyspace}")
        except Exception as exc:
            print(f"dropping keyspace {settings.cassandra.keyspace} failed (drop it by hand): {exc!r}", flush=True)
        await store.close()
    rows = check_windows(
        expected,
        calls,
        windows,
        now=load_end,
        finals=finals,
        requests=load.requests,
        early_slack_s=0.0,
        by_fault=args.repeat,
    )
    write_report(args, stack_dir, started, load_end, rows, nemesis.log, load)
    if getattr(args, "history", None):
        write_history(Path(args.history), expected, calls, windows, finals, load.requests)
    return rows


def write_history(
    path: Path,
    expected: list[Expected],
    calls: list[Call],
    windows: list[Window],
    finals: dict[uuid.UUID, str],
    requests: list[ApiRequest],
) -> None:
    """The whole history as JSON lines, for a second look at what the table sums up."""
    import json

    def record(kind: str, item: Any) -> str:
        fields = {k: str(v) if isinstance(v, uuid.UUID | datetime) else v for k, v in dataclasses.asdict(item).items()}
        return json.dumps({"kind": kind, **fields})

    lines = [record("expected", e) for e in expected]
    lines += [record("call", c) for c in calls] + [record("window", w) for w in windows]
    lines += [record("request", r) for r in requests]
    lines += [json.dumps({"kind": "final", "run_id": str(k), "status": v}) for k, v in finals.items()]
    path.write_text("\n".join(lines) + "\n")


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def write_report(
    args: argparse.Namespace,
    stack_dir: Path,
    started: datetime,
    ended: datetime,
    rows: list[WindowReport],
    events: list[str],
    load: Load,
) -> None:
    failed = [r.detail for r in load.requests if r.failed]
    lines = [
        f"soak on {stack_dir.name} ({', '.join(stack.specs_of(stack_dir))}), seed {args.seed}, "
        f"{args.minutes} min from {started:%Y-%m-%d %H:%M:%S} to {ended:%H:%M:%S} UTC, 2-core box, "
        f"load average at the end {loadavg()}",
        "",
        TABLE_HEADER,
        *(r.row() for r in rows),
        "",
        "nemesis:",
        *(f"  {e}" for e in events),
        f"API errors ({len(failed)}): " + "; ".join(sorted({d for d in failed})[:20]),
    ]
    text = "\n".join(lines)
    print(text, flush=True)
    if args.out:
        Path(args.out).write_text(text + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stack-dir", default=".stack-cluster", help="the stack to soak (default %(default)s)")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rate", type=float, default=2.0, help="one-off runs created per second")
    parser.add_argument("--faults", type=lambda v: v.split(","), default=list(FAULTS), help=",".join(FAULTS))
    parser.add_argument("--warmup-s", type=float, default=45.0)
    parser.add_argument(
        "--repeat", action="store_true", help="repeat the faults (a new seeded order each round) until the time is up"
    )
    parser.add_argument("--gap-s", type=float, default=10.0, help="quiet time between fault windows")
    parser.add_argument("--settle-s", type=float, default=20.0, help="a window lasts this long after the heal")
    parser.add_argument("--down-s", type=float, default=20.0, help="how long a server stays stopped")
    parser.add_argument("--drain-s", type=float, default=60.0, help="wait after the last due run before checking")
    parser.add_argument(
        "--canary-rounds", type=int, default=3, help="canary rounds in a row called within 1 s before the load starts"
    )
    parser.add_argument("--out", help="also write the report here")
    parser.add_argument("--history", help="write every expected run, call, window, request and final status here")
    args = parser.parse_args()
    args.stack_dir = Path(args.stack_dir).resolve()
    unknown = set(args.faults) - set(FAULTS)
    if unknown:
        parser.error(f"unknown faults {', '.join(sorted(unknown))}")
    rows = asyncio.run(soak(args))
    overall = rows[-1]
    return 0 if not (overall.report.lost or overall.report.early) else 1


if __name__ == "__main__":
    sys.exit(main())
