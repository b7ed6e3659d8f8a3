"""Apache Cassandra 5.0 (cassandra-all from Maven Central) on JDK 17: one fast dev node, or the nodes of a cluster."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from tickwheel.dev.stack.process import (
    ServerSpec,
    StackError,
    ensure_maven_jars,
    java_bin,
    port_open,
    server_dir,
)
from tickwheel.settings import host_port

log = logging.getLogger(__name__)

NAME = "cassandra"
NATIVE_PORT = 19042
STORAGE_PORT = 17000
HEAP_MIB = 1024
HEAP = f"{HEAP_MIB}m"
# A node of a cluster of several: three of them and the platform share a 2-core box with other work. A cluster of
# one (`--nodes 1`, the benchmarks' private servers) has the single stack's heap.
NODE_HEAP_MIB = 640
CLUSTER_NATIVE_PORT = 29042
CLUSTER_STORAGE_PORT = 27000


def _yaml(
    host: str, native_port: int, storage_port: int, seeds: Sequence[str], token: int, hints: bool, heap_mib: int
) -> str:
    """cassandra.yaml of one node (of a `heap_mib` heap): every node is a seed, so the nodes of a cluster may start
    in any order."""
    seed_list = ",".join(f"{seed}:{storage_port}" for seed in seeds)
    return f"""\
cluster_name: tickwheel-dev
num_tokens: 1
initial_token: {token}
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
listen_address: {host}
rpc_address: {host}
storage_port: {storage_port}
native_transport_port: {native_port}
start_native_transport: true
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "{seed_list}"
hinted_handoff_enabled: {"true" if hints else "false"}
memtable_heap_space: {memtable_heap_mib(heap_mib)}MiB
{_COMMON_YAML}"""


def memtable_heap_mib(heap_mib: int) -> int:
    """The memtables' share of a `heap_mib` heap: 3/8 of it (Cassandra's default is a quarter), flushed from half
    of it (`memtable_flush_writers: 1`): flushes up to 2.25x the defaults' and system.paxos rewritten about half as
    often (see MEMTABLE_OFFHEAP_MIB)."""
    return heap_mib * 3 // 8


# Memtables: Cassandra 5.0's trie memtables (for every table, system.paxos included: the `default` configuration)
# with their cells off the heap (`offheap_objects`), and room for them off it. system.paxos is LCS with random keys,
# and while its sstables hold less than 160 MiB LCS merges each new flush with all of L0: every flush of it rewrites
# every LWT's state kept (PAXOS_STATE_S). The memtable cleaner flushes the largest memtable whenever the node's
# memtables fill a third of their space (on or off heap). A skiplist on the heap took ~470 bytes of heap per
# system.paxos write (~4x its serialized size): at 237 runs/s a flush every ~12 s of 3.3 MiB, 78 % of the node's
# compaction in bytes (BENCHMARKS.md "Cassandra's compaction and GC per run"). A trie with off-heap cells takes ~100
# bytes of heap per write, so a flush holds 4x the writes and the state is rewritten a quarter as often; the cells
# are no longer the collector's to copy. Side by side: compaction 0.25x, GC 0.30x per run. The memtable cleaner
# flushes the largest memtable when the memtables hold 1 / (1 + memtable_flush_writers) of their heap share or of
# the off-heap space, whichever comes first (with the share below, the two come about together at 300 runs/s).
# Cassandra's defaults (a quarter of the heap, two flush writers: a third of it, 85 MiB on the 1 GiB heap) flushed
# system.paxos every ~50 s at 300 runs/s, each flush merged with all the Paxos state kept (up to PAXOS_STATE_S of
# it, ~90 MiB in 10 minutes): 12 compactions of 3-10 s in ten minutes, each taking a core from a 2-core box (the
# worst lag windows). 3/8 of the heap and one flush writer (half of it: 192 MiB) flush 2.25x as much each time: half
# the compactions, compaction 0.4x and Cassandra 0.94-0.97x per run (BENCHMARKS.md "Larger memtable flushes",
# session 26). A flush takes ~1 s on one writer.
MEMTABLE_OFFHEAP_MIB = 512
# Compaction throttled (Cassandra's default is 64 MiB/s; the stack ran it unthrottled, 0, until session 26): a merge
# of system.paxos's flush with the Paxos state kept (up to ~90 MiB) took a whole core for 3-10 s, the start lag's
# worst windows on a 2-core box (BENCHMARKS.md "Larger memtable flushes"); at 8 MiB/s the same merge spreads over
# ~10 s at a fraction of a core. What the node compacts at 300 runs/s is a fraction of that rate, and at the
# 100,000-run peak it keeps up (BENCHMARKS.md "G1 and the compaction throttle").
COMPACTION_MIB_S = 8

_COMMON_YAML = f"""\
commitlog_sync: periodic
commitlog_sync_period: 10000ms
commitlog_segment_size: 8MiB
auto_snapshot: false
snapshot_before_compaction: false
incremental_backups: false
dynamic_snitch: false
cdc_enabled: false
concurrent_compactors: 1
concurrent_reads: 8
concurrent_writes: 8
concurrent_counter_writes: 8
native_transport_max_threads: 16
compaction_throughput: {COMPACTION_MIB_S}MiB/s
memtable:
  configurations:
    skiplist:
      class_name: SkipListMemtable
    trie:
      class_name: TrieMemtable
    default:
      inherits: trie
memtable_allocation_type: offheap_objects
memtable_offheap_space: {MEMTABLE_OFFHEAP_MIB}MiB
memtable_flush_writers: 1
materialized_views_enabled: false
sasi_indexes_enabled: false
user_defined_functions_enabled: false
storage_compatibility_mode: NONE
paxos_variant: v2
paxos_state_purging: gc_grace
batch_size_warn_threshold: 640KiB
batch_size_fail_threshold: 1MiB
"""
# Request concurrency: at most 8 reads, 8 writes (and counter writes) and 16 native-transport requests run at once
# (Cassandra's defaults 32, 32, 32 and 128, sized for many cores). On the dev stack's two cores more never runs in
# parallel anyway; fewer work permits hand tasks to the request stages' workers already awake instead of waking more
# of them: 0.81x the node's context switches and 0.88x its request stages' CPU per run at 300 runs/s, the node 0.95x
# (BENCHMARKS.md "The driver's request path", set c2). Production sizes these for its nodes (docs/deploy.md).
#
# Paxos state (system.paxos: each LWT's promise, proposal and commit) is dropped by compaction once older than the
# base table's gc_grace_seconds (`gc_grace`), not kept by a TTL of max(3 h, gc_grace_seconds) = 10 days (`legacy`,
# Cassandra's default). system.paxos is LCS and the LWTs' keys are random: every flush was merged into an L1 that
# held every LWT of the node's life, so its compaction per run grew with the node's age (BENCHMARKS.md "Cost per
# run, round 5" and "round 6"). The platform's clients set gc_grace_seconds of the LWT tables to
# PAXOS_STATE_S (CLIENT_SETTINGS, written to the stack's env). Leaving `legacy` is one-way (`gc_grace` is the way
# back). The dev stack runs no repairs, so `repaired` (production's choice, docs/deploy.md) would keep it forever.
#
# A create writes its definition twice in one multi-partition batch (the job row and the audit row's diff): with the
# API's largest payload (`api.max_payload_bytes`, 256 KiB) that is ~520 KiB, over Cassandra's default
# batch_size_fail_threshold of 50 KiB, which refused every create with a payload above ~25 KiB (a 500, and with an
# Idempotency-Key a job row without its run). docs/deploy.md asks the same of a production cluster.
# 15 minutes: three rounds of Cassandra's Paxos auto repair (every 5 min, it finishes what a coordinator left
# uncommitted) and longer than any fault of the stack's soaks; a node of the stack's cluster stopped for longer
# may bring back cells whose tombstones its peers have purged (docs/deploy.md says what production must do).
PAXOS_STATE_S = 900
CLIENT_SETTINGS = {"TICKWHEEL_CASSANDRA_LWT_GC_GRACE_S": str(PAXOS_STATE_S)}
_PURGING_BY_GC_GRACE = "paxos_state_purging: gc_grace"


def client_settings(stack_dir: Path, names: Sequence[str]) -> dict[str, str]:
    """CLIENT_SETTINGS when every node `names` was configured with gc_grace purging (its cassandra.yaml), else none:
    a node started by an older checkout keeps `legacy` until restarted, and a checkout that predates the setting
    would refuse an env file naming it."""
    for name in names:
        path = server_dir(stack_dir, name) / "conf" / "cassandra.yaml"
        if not path.exists() or _PURGING_BY_GC_GRACE not in path.read_text().splitlines():
            return {}
    return dict(CLIENT_SETTINGS)


# The single dev node; private benchmark platforms rewrite its ports.
_YAML = _yaml("127.0.0.1", NATIVE_PORT, STORAGE_PORT, ["127.0.0.1"], token=0, hints=False, heap_mib=HEAP_MIB)

_LOGBACK = """\
<configuration scan="false">
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %logger{0} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="STDOUT"/></root>
</configuration>
"""

# conf/jvm17-server.options of the cassandra-5.0 branch, plus zipkin's extra opens.
_JPMS = [
    *("--add-exports", "java.base/jdk.internal.misc=ALL-UNNAMED"),
    *("--add-exports", "java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED"),
    *("--add-exports", "java.rmi/sun.rmi.registry=ALL-UNNAMED"),
    *("--add-exports", "java.rmi/sun.rmi.server=ALL-UNNAMED"),
    *("--add-exports", "java.sql/java.sql=ALL-UNNAMED"),
    *("--add-exports", "java.base/java.lang.ref=ALL-UNNAMED"),
    *("--add-exports", "jdk.unsupported/sun.misc=ALL-UNNAMED"),
    *("--add-exports", "jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED"),
    *("--add-exports", "jdk.attach/sun.tools.attach=ALL-UNNAMED"),
    *("--add-exports", "java.base/jdk.internal.ref=ALL-UNNAMED"),
    *("--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED"),
    *(
        arg
        for pkg in (
            "java.base/java.lang.module",
            "java.base/jdk.internal.loader",
            "java.base/jdk.internal.ref",
            "java.base/jdk.internal.reflect",
            "java.base/jdk.internal.math",
            "java.base/jdk.internal.module",
            "java.base/jdk.internal.util.jar",
            "jdk.management/com.sun.management.internal",
            "java.base/sun.nio.ch",
            "java.base/java.io",
            "java.base/java.lang.reflect",
            "jdk.compiler/com.sun.tools.javac",
            "java.base/java.lang",
            "java.base/java.util",
            "java.base/java.nio",
            "java.base/java.util.concurrent",
            "java.base/java.util.concurrent.atomic",
        )
        for arg in ("--add-opens", f"{pkg}=ALL-UNNAMED")
    ),
]

# G1 (upstream's flags of the cassandra-5.0 branch before session 23) with the heap on transparent huge pages
# (asked for with madvise, the mode Debian's kernel defaults to; where they are off the JVM warns and goes on): in
# a VM every TLB miss walks two page tables, and the node ran at 0.94x with them (BENCHMARKS.md "The JVMs'
# collectors and huge pages"). The throughput collector (ParallelGC, the stack's from session 23 to 26) cost the
# same with the huge pages, but stopped the node for each old-generation collection: the memtables' heap part,
# which the young collections promote and which dies minutes later in the old generation. With the larger memtable
# share (`memtable_heap_mib`) that was two stops of 0.38-0.67 s in every ten minutes at 300 runs/s, the worst
# windows of the start lag; G1 empties the old generation concurrently: no pause of 200 ms in ten minutes, the
# node's CPU per run level (BENCHMARKS.md "G1 and the compaction throttle", session 27). Production keeps G1 too
# (docs/deploy.md).
_JVM = [
    "-Xss256k",
    "-XX:+UseG1GC",
    "-XX:+ParallelRefProcEnabled",
    "-XX:MaxTenuringThreshold=1",
    "-XX:G1HeapRegionSize=16m",
    "-XX:MaxGCPauseMillis=300",
    "-XX:InitiatingHeapOccupancyPercent=70",
    "-XX:+UseTransparentHugePages",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djdk.attach.allowAttachSelf=true",
    "-Djava.net.preferIPv4Stack=true",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dio.netty.allocator.useCacheForAllThreads=true",
    "-Dio.netty.allocator.maxOrder=11",
    # A request stage's worker (SEPWorker) renames its thread after the stage each time it is handed a task, a
    # system call per hand-over (several per statement); the workers keep their pool's name instead.
    "-Dcassandra.set_sep_thread_name=false",
    # The approximate clock (request deadlines, metrics) ticks every 10 ms instead of 2: 100 wake-ups a second of
    # its thread instead of 500, idle or not; a deadline of seconds does not need it finer.
    "-Dcassandra.approximate_time_precision_ms=10",
]

# Test-speed properties. It is a dev stack: unsafesystem and skip_sync skip fsyncs (data may be lost on a
# machine crash, never on a process kill, since the OS page cache still holds it).
_DEV_PROPERTIES = [
    "-Dcassandra-foreground=yes",
    "-Dcassandra.skip_wait_for_gossip_to_settle=0",
    "-Dcassandra.ring_delay_ms=1000",
    "-Dcassandra.superuser_setup_delay_ms=0",
    "-Dcassandra.load_ring_state=false",
    "-Dcassandra.unsafesystem=true",
    "-Dcassandra.skip_sync=true",
    "-Dcassandra.test.flush_local_schema_changes=false",
]

# Cassandra's request stages (native transport, mutations, reads, Paxos) share one pool of workers (SEPWorker): a
# worker without work "spins" in parkNanos sleeps of 10 us and up before it parks for good, and Linux rounds each
# such sleep up by the thread's timer slack (50 us by default). At a few hundred statements a second the workers
# woke ~35 times per statement, a third of the pool's CPU in the kernel (BENCHMARKS.md "Cost per run, round 5").
# A slack of 1 ms makes each spin sleep last ~1 ms: the same work with a sixth of the wake-ups. Wake-ups by a
# producer (unpark) are not delayed; a task that finds a worker spinning waits for that worker's sleep to end,
# so a statement's latency grows by up to the slack per stage it crosses. 4 ms (session 19) cut another third of
# the node's context switches (0.92x its CPU per run at 300 runs/s) but made a multi-partition read, one stage
# hop per partition, ~3x slower (a 128-partition COUNT ~0.35 s: the operator page's forecast no longer answered
# in 30 s; a take-over's reads would be slower too): kept at 1 ms (BENCHMARKS.md "Wake-ups"). Timer slack is
# inherited by every thread and kept across exec: the JVM is started through a one-line launcher that sets it
# (prctl PR_SET_TIMERSLACK).
TIMER_SLACK_NS = 1_000_000
_PR_SET_TIMERSLACK = 29
_WITH_TIMER_SLACK = (
    "import ctypes, os, sys; "
    f"ctypes.CDLL(None).prctl({_PR_SET_TIMERSLACK}, int(sys.argv[1]), 0, 0, 0); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)


def with_timer_slack(argv: list[str], slack_ns: int = TIMER_SLACK_NS) -> list[str]:
    """`argv` started with this timer slack (Linux; the slack of every thread it makes)."""
    return [sys.executable, "-c", _WITH_TIMER_SLACK, str(slack_ns), *argv]


def prepare(stack_dir: Path, name: str = NAME, yaml: str = _YAML) -> None:
    ensure_maven_jars(stack_dir, NAME)
    home = server_dir(stack_dir, name)
    for sub in ("conf", "data", "logs", "triggers", "tmp"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    (home / "conf" / "cassandra.yaml").write_text(yaml)
    (home / "conf" / "logback.xml").write_text(_LOGBACK)


def command(stack_dir: Path, name: str = NAME, heap: str = HEAP) -> list[str]:
    lib = stack_dir / "lib" / NAME
    home = server_dir(stack_dir, name).resolve()
    jamm = sorted(lib.glob("jamm-*.jar"))
    agent = [f"-javaagent:{jamm[0].resolve()}"] if jamm else []
    return with_timer_slack(
        [
            java_bin(),
            "-cp",
            f"{lib.resolve()}/*",
            f"-Xms{heap}",
            f"-Xmx{heap}",
            *_JVM,
            *agent,
            *_JPMS,
            *_DEV_PROPERTIES,
            f"-Djava.io.tmpdir={home / 'tmp'}",
            f"-Dcassandra.config=file://{home / 'conf' / 'cassandra.yaml'}",
            f"-Dcassandra.storagedir={home / 'data'}",
            f"-Dcassandra.logdir={home / 'logs'}",
            f"-Dcassandra.triggers_dir={home / 'triggers'}",
            f"-Dlogback.configurationFile={home / 'conf' / 'logback.xml'}",
            "org.apache.cassandra.service.CassandraDaemon",
        ]
    )


def probe(endpoint: str, ring: int = 1) -> str:
    """The node's release version (read on that very node through the Python driver) and the size of its ring;
    not ready until the node knows `ring` nodes (a cluster's node has not heard of every peer yet)."""
    host, port = host_port(endpoint, 9042)
    if not port_open(host, port):
        raise StackError(f"nothing listens on {host}:{port}")
    from cassandra.cluster import Cluster  # deferred: the driver is slow to import
    from cassandra.policies import WhiteListRoundRobinPolicy

    from tickwheel.store.cassandra import SERVER_VERSION

    cluster = Cluster(
        contact_points=[host],
        port=port,
        protocol_version=5,
        connect_timeout=3,
        control_connection_timeout=3,
        load_balancing_policy=WhiteListRoundRobinPolicy([host]),  # this node answers, not a peer
    )
    try:
        session = cluster.connect()
        row = session.execute(SERVER_VERSION, timeout=5).one()
        known = len(cluster.metadata.all_hosts())  # this node and the peers it knows (system.peers)
    except Exception as exc:  # the driver raises NoHostAvailable, OperationTimedOut, ...
        raise StackError(f"CQL query failed: {exc}") from exc
    finally:
        cluster.shutdown()
    if known < ring:
        raise StackError(f"Cassandra {row.release_version} knows {known} of the cluster's {ring} nodes")
    return f"Cassandra {row.release_version}" + (f", {known} nodes in its ring" if known > 1 else "")


SPEC = ServerSpec(
    name=NAME,
    env_var="TICKWHEEL_CASSANDRA",
    endpoint=f"127.0.0.1:{NATIVE_PORT}",
    timeout_s=180.0,
    prepare=prepare,
    command=command,
    probe=probe,
)


def node_spec(hosts: Sequence[str], index: int) -> ServerSpec:
    """Node `index` (0-based) of a cluster on `hosts`: tokens evenly spread, hints on (a restarted node catches up)."""
    name = f"{NAME}-{index + 1}"
    token = -(2**63) + index * (2**64 // len(hosts))
    heap_mib = HEAP_MIB if len(hosts) == 1 else NODE_HEAP_MIB
    yaml = _yaml(
        hosts[index], CLUSTER_NATIVE_PORT, CLUSTER_STORAGE_PORT, hosts, token=token, hints=True, heap_mib=heap_mib
    )
    return ServerSpec(
        name=name,
        env_var=SPEC.env_var,
        endpoint=f"{hosts[index]}:{CLUSTER_NATIVE_PORT}",
        timeout_s=300.0,
        prepare=partial(prepare, name=name, yaml=yaml),
        command=partial(command, name=name, heap=f"{heap_mib}m"),
        probe=partial(probe, ring=len(hosts)),
    )
