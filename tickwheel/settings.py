"""One settings tree, read once at start-up from the environment.

Every key is `TICKWHEEL_<SECTION>_<FIELD>` (upper case), except the four server endpoints, which are
`TICKWHEEL_CASSANDRA`, `TICKWHEEL_KAFKA`, `TICKWHEEL_ZOOKEEPER` and `TICKWHEEL_REDIS`. Values missing from the
environment are taken from an env file only when one is named (`TICKWHEEL_ENV_FILE`, or `env_file=`: the local
platform names `.stack/env`, which `tickwheel stack up` writes), then from the defaults below; a process started
alone reads only its environment. An unknown `TICKWHEEL_` key is an error: a typo must not silently fall back to a
default.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tickwheel.errors import SettingsError

PREFIX = "TICKWHEEL_"
ENDPOINT_KEYS = {
    "TICKWHEEL_CASSANDRA": ("cassandra", "hosts"),
    "TICKWHEEL_KAFKA": ("kafka", "bootstrap"),
    "TICKWHEEL_ZOOKEEPER": ("zookeeper", "hosts"),
    "TICKWHEEL_REDIS": ("redis", "url"),
}
# Keys read by other tools (the stack launcher, the CLI, the tenant client) rather than by this tree.
PASS_THROUGH_KEYS = frozenset(
    {"TICKWHEEL_STACK_DIR", "TICKWHEEL_ENV_FILE", "TICKWHEEL_API_URL", "TICKWHEEL_API_KEY", "TICKWHEEL_PROFILE"}
)


@dataclass(frozen=True, slots=True)
class CassandraSettings:
    hosts: tuple[str, ...] = ("127.0.0.1:19042",)
    keyspace: str = "tickwheel"
    replication: str = "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    consistency: str = "QUORUM"
    local_dc: str = "datacenter1"
    request_timeout_s: float = 10.0
    connect_timeout_s: float = 10.0
    # The driver's default backoff reaches 600 s: a node back after a minute's outage was reconnected to minutes
    # later (the nemesis soak: a single node's API answered 503 for 8 minutes after Cassandra was back).
    reconnect_max_s: float = 5.0
    # How long a node that came back up (or let a request run into `request_timeout_s`) is asked last as a
    # coordinator (store.coordinators.WarmUpPolicy): the soak's restarted node timed out the requests it
    # coordinated for about a minute after the driver saw it up. 0: every up node coordinates at once.
    warm_up_s: float = 60.0
    # gc_grace_seconds of the tables written with LWTs on every run (store.migrate.LWT_TABLES), set at each
    # migrate; 0 leaves them as created (Cassandra's 10 days). Under `paxos_state_purging: gc_grace` it is also how
    # long each LWT's Paxos state stays in system.paxos (docs/deploy.md "Cassandra nodes"; the dev stack: 900).
    lwt_gc_grace_s: int = 0
    # Where the driver's connections do their I/O: `loop`, the process's event loop (tickwheel/store/loop_io.py: no
    # thread crossing per request; no TLS), or `libev`, the driver's own thread (the default until session 19: the
    # worker's CPU per run 0.89x on the loop, BENCHMARKS.md "Wake-ups").
    driver_io: str = "loop"
    # Group commit (store/grouping.py): a create's batch leaves alone while fewer than this many batches are in
    # flight, else with the others queued behind them. Lower: more creates a batch, each waiting for an answer.
    group_commit_below: int = 4


@dataclass(frozen=True, slots=True)
class KafkaSettings:
    bootstrap: str = "127.0.0.1:19092"
    topic_prefix: str = ""
    lane_partitions: int = 12
    near_partitions: int = 16
    replication_factor: int = 1
    request_timeout_s: float = 10.0
    # How long a producer holds a message to send it with the ones that follow (librdkafka's `linger.ms`): the
    # broker's cost is per produce request and per fetch answer, nearly whatever their size. Longer: fewer requests
    # per message, each message that much later. `lane_linger_ms` is the dispatcher's, for the runs it fires.
    linger_ms: float = 2.0
    lane_linger_ms: float = 1.0
    # The API's producer only announces near-term rows, which nobody waits for (`NearAnnouncer`): it can hold them
    # longer, one produce request per ~6 creates at 300 creates/s instead of one each; an announcement reaches the
    # dispatchers at most that much later (rows are due seconds after they are written, the rescan catches the rest).
    announce_linger_ms: float = 20.0
    # The API's announcements of rows due 2 s or more ahead (`bus.near.AHEAD_LEAD_S`: every create made ahead of its
    # time) go through a second producer that holds them this long: librdkafka sends a produce request per partition
    # and batch, so 300 creates/s over the near-term topic's 16 partitions were ~250 requests a second at 20 ms.
    announce_ahead_linger_ms: float = 250.0
    # How long a consumer's fetch waits at the broker for `fetch_min_bytes` to arrive (librdkafka's
    # `fetch.wait.max.ms` and `fetch.min.bytes`). librdkafka's 1 byte answered a fetch per message or two at 300
    # runs/s; waiting up to 20 ms answers one fetch per ~6 messages, for the broker and the worker 0.7x and 0.9x CPU
    # per run and at most 20 ms more before a message is seen (BENCHMARKS.md "Kafka's fetches wait 20 ms").
    fetch_wait_ms: int = 20
    fetch_min_bytes: int = 65_536


@dataclass(frozen=True, slots=True)
class ZooKeeperSettings:
    hosts: str = "127.0.0.1:21810"
    chroot: str = "/tickwheel"
    session_timeout_s: float = 10.0
    # The longest wait between two rounds of reconnection: kazoo's default doubles up to an hour, so after a
    # 30 s loss of quorum a client slept 12-25 s more and came back after the new leader had expired its session.
    reconnect_max_s: float = 1.0


@dataclass(frozen=True, slots=True)
class RedisSettings:
    url: str = "redis://127.0.0.1:16379/0"
    key_prefix: str = "tw:"


@dataclass(frozen=True, slots=True)
class ApiSettings:
    host: str = "127.0.0.1"
    port: int = 8080
    max_payload_bytes: int = 256 * 1024
    max_jobs_per_tenant: int = 100_000
    requests_per_s: int = 200
    min_interval_s: int = 60
    idempotency_ttl_s: int = 86_400
    page_size_max: int = 500
    auth_cache_s: float = 5.0  # how long a checked API key is trusted in-process (revocations are checked in Redis)
    auth_negative_cache_s: float = 2.0  # how long a refused API key is refused without a database read
    # HMAC secrets for list cursors, newest first (rotate: prepend, drop the last later); empty: random per process
    cursor_secrets: tuple[str, ...] = ()
    auth_failures_per_min: int = 60  # failed authentications per client address, and per key prefix, before 429
    # sha256 (hex) of the operator key that opens /v1/operator/*; empty: the operator endpoints answer 403
    operator_key_sha256: str = ""
    # Admission control of one process (api/admission.py, tickwheel/core/admission.py; probe routes are never shed):
    # requests worked on at once (0: no admission control), requests waiting for a slot beyond which one is shed at
    # once, and how long one may wait (wait_max_s; wait_target_s once waits have stayed above it for
    # overload_interval_s). A loop lag at or above lag_target_s for overload_interval_s sheds every new request (0:
    # lag sheds nothing). A shed request is a 503 with Retry-After of shed_retry_after_s (rounded up) or a second more.
    max_in_flight: int = 128
    max_waiting: int = 256
    wait_max_s: float = 0.5
    wait_target_s: float = 0.05
    overload_interval_s: float = 1.0
    lag_target_s: float = 0.5
    shed_retry_after_s: float = 1.0


@dataclass(frozen=True, slots=True)
class DispatcherSettings:
    host: str = "127.0.0.1"
    port: int = 8081
    preload_horizon_s: int = 120
    scan_interval_s: float = 5.0
    rescan_interval_s: float = 30.0
    checkpoint_interval_s: float = 2.0
    resume_grace_s: int = 120
    # Taking shards over, the rows due from this long ago to the loaded horizon are read (and fired) first, the backlog
    # since the checkpoints after (tickwheel/core/acquisition.py): it covers how long a dead owner can have stopped
    # firing before the take-over began (1-3 s for a killed or stopped dispatcher, the session timeout at worst).
    acquire_lookback_s: float = 20.0
    capacity_per_s: int = 20_000
    fire_concurrency: int = 256
    # After a round that sent something the fire loop waits at least this long before the next: rows due within it
    # leave together, one wake-up of the loop and one produce request for several (~15 at 300 runs/s) instead of
    # one each, and the workers take them as one poll. A row fires at most this much after its due time (or after
    # it reached the wheel, if later), never before. 50 ms against 10: the dispatcher 0.61x, the worker 0.89x,
    # Kafka 0.87x per run at 300 runs/s (BENCHMARKS.md "...the fire loop's grain at 50 ms", set g5).
    fire_grain_ms: int = 50
    # One LWT per moved shard per write: 1024 shards every 10 s were ~100 LWT/s on an idle box. A new owner reads
    # from the checkpoint minus resume_grace_s (120 s) anyway, so a coarser mark costs only a longer re-read.
    checkpoint_step_s: float = 60.0
    # How often the member znode is confirmed, and how old the last confirmation may be for the dispatcher to fire:
    # a stopped process that resumes fires nothing until it has confirmed again. Shorter than the coordinator's
    # member_silent_evict_s minus member_probe_timeout_s (tickwheel/core/liveness.py `window_is_safe`), so a
    # dispatcher evicted for silence has stopped firing before its shards move.
    liveness_interval_s: float = 0.25
    alive_window_s: float = 1.0
    missed_after_s: float = 60.0
    overlap_recheck_s: float = 5.0
    handover_timeout_s: float = 20.0


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    host: str = "127.0.0.1"
    port: int = 8082
    # Lanes this worker consumes; a deployment may run urgent-only workers with their own minimum replicas.
    lanes: tuple[str, ...] = ("urgent", "default", "bulk")
    concurrency_urgent: int = 64
    concurrency_default: int = 256
    concurrency_bulk: int = 128
    lease_s: int = 60
    egress_allow: tuple[str, ...] = ()
    tenant_concurrency: int = 200
    target_concurrency: int = 100
    target_rate_per_s: float = 100.0
    response_excerpt_bytes: int = 1024
    lease_margin_s: float = 10.0
    defer_s: float = 2.0
    breaker_window_s: float = 60.0
    breaker_min_calls: int = 20
    breaker_min_tenants: int = 2  # tenants whose own breaker must be open before a host is closed to everyone
    breaker_open_s: float = 30.0
    shutdown_grace_s: float = 20.0
    commit_interval_s: float = 1.0
    # The lane consumers' Kafka group session: a worker that dies (SIGKILL) holds its lane partitions this long
    # before the group hands them to the others, and the runs fired onto them wait (the soak's "SIGKILL worker"
    # window: p99 9.8 s at 10 s). Raised to the brokers' group.min.session.timeout.ms when they accept no less
    # (Kafka's default is 6 s; the local stack's brokers accept 2 s). librdkafka heartbeats from its own thread, so
    # a busy event loop does not end the session.
    group_session_s: float = 3.0
    # Runs a lane reads beyond its free slots into its per-tenant fair-share queue (worker/consumer.py); the
    # deeper, the larger a backlog a small tenant's runs can overtake. 0: no fair share, runs start in arrival order.
    fair_share_readahead: int = 20_000
    # How long a lane poll that waited for its first message waits for the rest of a burst (tickwheel/bus/kafka.py
    # `KafkaConsumer.poll`): the runs of one poll are handled in step, so their job reads and unlogged batches
    # leave as one request each (tickwheel/store/rounds.py). Longer: fewer requests per run, a later start.
    lane_gather_s: float = 0.005
    # The urgent and bulk lanes' fetches, where they differ from `kafka.fetch_wait_ms` / `kafka.fetch_min_bytes`
    # (which suit the default lane's steady flow). Every consumer's fetch is a broker request whether or not
    # anything came, so an idle lane waiting 20 ms asked 50 times a second. The urgent lane is answered at its first
    # message (a trickle: waiting for more only delays it) and asks twice a second when idle; the bulk lane's runs
    # start up to `bulk_fetch_wait_ms` later when its flow is thin (BENCHMARKS.md "Produce requests per partition").
    urgent_fetch_wait_ms: int = 500
    urgent_fetch_min_bytes: int = 1
    bulk_fetch_wait_ms: int = 250


@dataclass(frozen=True, slots=True)
class CoordinatorSettings:
    host: str = "127.0.0.1"
    port: int = 8083
    forecast_minutes: int = 10
    sweep_interval_s: float = 60.0
    sweep_grace_s: int = 300
    sweep_page_size: int = 500
    # The sweeper reads each minute's due rows once, after the grace; a keyspace's first pass starts this far back,
    # and a pass reads at most this many minutes (a coordinator back after a long outage catches up pass by pass).
    sweep_lookback_s: int = 3600
    sweep_minutes_per_pass: int = 60
    # Each refresh reads forecast_minutes x shards partitions (10 x 1024): every 30 s that was ~340 reads/s, more
    # than the runs of a 50 runs/s load cost; the pre-scaling it feeds looks minutes ahead, so 2 minutes is fresh.
    forecast_interval_s: float = 120.0
    far_move_interval_s: float = 300.0
    far_lookback_days: int = 7
    member_probe_interval_s: float = 0.5
    member_probe_timeout_s: float = 0.5  # one probe's connect and /healthz answer together (a thread answers)
    # A member whose health port accepts but does not answer this long (four probes in a row) is stopped (SIGSTOP):
    # evicted like a refusing one. Its shards then wait this long plus the takeover (~2-3 s in the soak), so it is
    # short; a GC pause or a starved box delays the dispatcher's health thread (a thread of its own, answering in
    # milliseconds) by far less, and an eviction that was not needed costs a re-registration and re-fires that
    # claims make harmless.
    member_silent_evict_s: float = 2.0
    reconcile_interval_s: float = 600.0  # how often the reconciler compares promised fires with recorded runs
    reconcile_lookback_s: int = 86_400  # how far back it looks (bounded by the job's current version)
    reconcile_pages_per_pass: int = 20  # pages of sweep_page_size ids (the recurring jobs' index) a pass reads


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    """How long data is kept after it stops being needed; a tenant's `retention_days` overrides all of them."""

    runs_days: int = 30  # finished runs, their attempts and history rows
    dead_letters_days: int = 30
    audit_days: int = 90  # the job change log
    max_days: int = 3650  # the longest a tenant may be given


@dataclass(frozen=True, slots=True)
class NotifySettings:
    """Run-event notifications sent by workers (worker/notify.py): their queue, retries and timeout."""

    queue_size: int = 10_000  # events waiting per worker; beyond it new events are dropped (counted)
    concurrency: int = 16
    tries: int = 5
    base_delay_s: float = 1.0
    max_delay_s: float = 60.0
    timeout_s: float = 10.0


@dataclass(frozen=True, slots=True)
class Settings:
    cassandra: CassandraSettings = field(default_factory=CassandraSettings)
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    zookeeper: ZooKeeperSettings = field(default_factory=ZooKeeperSettings)
    redis: RedisSettings = field(default_factory=RedisSettings)
    api: ApiSettings = field(default_factory=ApiSettings)
    dispatcher: DispatcherSettings = field(default_factory=DispatcherSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    coordinator: CoordinatorSettings = field(default_factory=CoordinatorSettings)
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    notify: NotifySettings = field(default_factory=NotifySettings)
    shards: int = 1024
    log_level: str = "INFO"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, env_file: Path | None = None) -> Settings:
        """Build the tree from `environ` (default: the process environment) over the values of `env_file`, or of
        the file `TICKWHEEL_ENV_FILE` names; with neither, from `environ` alone (never an implicit `.stack/env`)."""
        environ = os.environ if environ is None else environ
        named = env_file or (Path(environ["TICKWHEEL_ENV_FILE"]) if environ.get("TICKWHEEL_ENV_FILE") else None)
        from_file = read_env_file(named) if named else {}
        values = {**from_file, **{k: v for k, v in environ.items() if k.startswith(PREFIX)}}
        return build(values)

    def to_env(self) -> dict[str, str]:
        """The `TICKWHEEL_*` variables that build this tree again, the inverse of `from_env`
        (`build(s.to_env()) == s`): every value that differs from its default."""
        defaults = Settings()
        variables = {}
        for key, (section, name, _kind) in _known_keys().items():
            value, default = (getattr(getattr(tree, section) if section else tree, name) for tree in (self, defaults))
            if value != default:
                variables[key] = _format(key, value)
        return variables

    def process_env(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of a child process that must run with exactly these settings: `environ` (default: this
        process's) without its `TICKWHEEL_*` variables, so no stray key or env file changes them, plus `to_env()`."""
        environ = os.environ if environ is None else environ
        return {**{k: v for k, v in environ.items() if not k.startswith(PREFIX)}, **self.to_env()}


def read_env_file(path: Path) -> dict[str, str]:
    """Parse `KEY=VALUE` lines (the format `tickwheel stack up` writes); a missing file is empty."""
    if not path.is_file():
        return {}
    pairs = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            pairs[key.strip()] = value.strip().strip("'\"")
    return pairs


def build(values: Mapping[str, str]) -> Settings:
    """Apply `TICKWHEEL_*` values to the defaults; unknown keys and unparsable values raise SettingsError."""
    sections: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    known = _known_keys()
    for key, raw in values.items():
        if key in PASS_THROUGH_KEYS:
            continue
        if key not in known:
            raise SettingsError(f"unknown setting {key}; known settings: {', '.join(sorted(known))}")
        section, name, kind = known[key]
        parsed = _parse(key, raw, kind)
        if section:
            sections.setdefault(section, {})[name] = parsed
        else:
            top[name] = parsed
    defaults = Settings()
    replaced = {
        name: dataclasses.replace(getattr(defaults, name), **fields) for name, fields in sections.items()
    }
    return dataclasses.replace(defaults, **replaced, **top)


def _known_keys() -> dict[str, tuple[str, str, Any]]:
    keys: dict[str, tuple[str, str, Any]] = {}
    hints = typing.get_type_hints(Settings)
    for top_field in dataclasses.fields(Settings):
        kind = hints[top_field.name]
        if dataclasses.is_dataclass(kind):
            sub_hints = typing.get_type_hints(kind)
            for sub in dataclasses.fields(kind):
                key = f"{PREFIX}{top_field.name}_{sub.name}".upper()
                keys[key] = (top_field.name, sub.name, sub_hints[sub.name])
        else:
            keys[f"{PREFIX}{top_field.name}".upper()] = ("", top_field.name, kind)
    for key, (section, name) in ENDPOINT_KEYS.items():
        keys[key] = keys.pop(f"{PREFIX}{section}_{name}".upper())
    return keys


def _parse(key: str, raw: str, kind: Any) -> Any:
    try:
        if kind is int:
            return int(raw)
        if kind is float:
            return float(raw)
        if kind is bool:
            if raw.lower() not in {"1", "0", "true", "false", "yes", "no"}:
                raise ValueError(raw)
            return raw.lower() in {"1", "true", "yes"}
        if typing.get_origin(kind) is tuple or isinstance(kind, types.GenericAlias):
            return tuple(part.strip() for part in raw.split(",") if part.strip())
        return raw
    except ValueError as exc:
        raise SettingsError(f"{key}={raw!r} is not a valid {getattr(kind, '__name__', kind)}") from exc


def _format(key: str, value: Any) -> str:
    """A value as `_parse` reads it back; a list item that would not survive the comma-separated form raises."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        items = [str(item) for item in value]
        if any("," in item or item != item.strip() or not item for item in items):
            raise SettingsError(f"{key}: {value!r} cannot be written as comma-separated items")
        return ",".join(items)
    return str(value)


def host_port(endpoint: str, default_port: int) -> tuple[str, int]:
    """`host:port`, a bare host, or the netloc of a URL, to a pair: the one place endpoints are parsed."""
    netloc = endpoint.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    host, sep, port = netloc.rpartition(":")
    return (host, int(port)) if sep and host else (netloc, default_port)
