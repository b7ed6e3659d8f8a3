"""Apache Kafka 4.x (kafka_2.13 from Maven Central) on JDK 17: one KRaft broker+controller, or a cluster of them.

A cluster's nodes are each broker and controller (a static quorum of all of them), with topics replicated to three
brokers and `min.insync.replicas=2`: an acks=all write succeeds with one broker down, and fails with two.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import subprocess
import uuid
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

NAME = "kafka"
BROKER_PORT = 19092
CONTROLLER_PORT = 19093
CLUSTER_BROKER_PORT = 29092
CLUSTER_CONTROLLER_PORT = 29093
CLUSTER_ID_FILE = "kafka-cluster-id"

_PROPERTIES = f"""\
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:{CONTROLLER_PORT}
listeners=PLAINTEXT://127.0.0.1:{BROKER_PORT},CONTROLLER://127.0.0.1:{CONTROLLER_PORT}
advertised.listeners=PLAINTEXT://127.0.0.1:{BROKER_PORT}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={{data_dir}}
num.partitions=1
num.network.threads=2
num.io.threads=2
num.recovery.threads.per.data.dir=2
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=2000
log.flush.interval.messages=9223372036854775807
log.cleaner.dedupe.buffer.size=16777216
auto.create.topics.enable=false
"""

_LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = info
logger.ak.name = org.apache.kafka
logger.ak.level = warn
"""

# A cluster node's differences from the single broker: replicated internal topics, static voters, and the
# broker's defaults for the topics the platform creates.
_NODE_OVERRIDES = {
    "node.id": "{node_id}",
    "controller.quorum.voters": "{voters}",
    "offsets.topic.replication.factor": "{replicas}",
    "transaction.state.log.replication.factor": "{replicas}",
    "transaction.state.log.min.isr": "{min_isr}",
    "share.coordinator.state.topic.replication.factor": "{replicas}",
    "share.coordinator.state.topic.min.isr": "{min_isr}",
    "default.replication.factor": "{replicas}",
    "min.insync.replicas": "{min_isr}",
    "unclean.leader.election.enable": "false",
    "num.partitions": "1",
}

_HEAP = ["-Xms512m", "-Xmx768m"]
NODE_HEAP = ["-Xms256m", "-Xmx384m"]
# KAFKA_JVM_PERFORMANCE_OPTS of bin/kafka-run-class.sh.
_JVM = [
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    "-Djava.net.preferIPv4Stack=true",
]


def _paths(stack_dir: Path, name: str = NAME) -> tuple[Path, Path, Path]:
    home = server_dir(stack_dir, name).resolve()
    return home / "server.properties", home / "log4j2.properties", home / "data"


def _java(stack_dir: Path, name: str, heap: Sequence[str], *args: str) -> list[str]:
    lib = (stack_dir / "lib" / NAME).resolve()
    _, log4j2, _ = _paths(stack_dir, name)
    return [java_bin(), *heap, *_JVM, f"-Dlog4j2.configurationFile={log4j2}", "-cp", f"{lib}/*", *args]


def prepare(stack_dir: Path) -> None:
    """Resolve jars, write config, and format the storage once (a dynamic quorum of one: --standalone)."""
    _prepare(stack_dir, NAME, _PROPERTIES, _new_cluster_id(), ["--standalone"])


def _prepare(stack_dir: Path, name: str, properties: str, cluster_id: str, quorum: list[str]) -> None:
    ensure_maven_jars(stack_dir, NAME)
    props, log4j2, data = _paths(stack_dir, name)
    data.mkdir(parents=True, exist_ok=True)
    props.write_text(properties.format(data_dir=data))
    log4j2.write_text(_LOG4J2)
    if (data / "meta.properties").exists():
        return
    argv = _java(
        stack_dir, name, NODE_HEAP, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(props),
        *quorum, "--ignore-formatted",
    )  # fmt: skip
    result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if result.returncode != 0:
        raise StackError(f"kafka storage format failed:\n{(result.stdout + result.stderr)[-4000:]}")
    log.info("formatted %s storage, cluster id %s", name, cluster_id)


def _new_cluster_id() -> str:
    """A random id (Kafka's own form); one in 64 starts with `-`, which `format -t ID` read as an option (a stack
    that failed to start): it is passed as `--cluster-id=ID`."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def command(stack_dir: Path, name: str = NAME, heap: Sequence[str] = tuple(_HEAP)) -> list[str]:
    props, _, _ = _paths(stack_dir, name)
    return _java(stack_dir, name, heap, "kafka.Kafka", str(props))


def _node_properties(hosts: Sequence[str], index: int) -> str:
    host = hosts[index]
    voters = ",".join(f"{i + 1}@{h}:{CLUSTER_CONTROLLER_PORT}" for i, h in enumerate(hosts))
    single = {
        "listeners": f"PLAINTEXT://{host}:{CLUSTER_BROKER_PORT},CONTROLLER://{host}:{CLUSTER_CONTROLLER_PORT}",
        "advertised.listeners": f"PLAINTEXT://{host}:{CLUSTER_BROKER_PORT}",
    }
    fields = {"node_id": index + 1, "voters": voters, "replicas": len(hosts), "min_isr": min(2, len(hosts))}
    overrides = {k: v.format(**fields) for k, v in _NODE_OVERRIDES.items()} | single
    lines = []
    for line in _PROPERTIES.splitlines():
        key = line.partition("=")[0]
        if key == "controller.quorum.bootstrap.servers":  # a static quorum instead (controller.quorum.voters)
            continue
        lines.append(f"{key}={overrides.pop(key)}" if key in overrides else line)
    lines += [f"{k}={v}" for k, v in overrides.items()]
    return "\n".join(lines) + "\n"


def _prepare_node(stack_dir: Path, hosts: Sequence[str], index: int) -> None:
    """Format a node's storage with the cluster's one id (written once in the stack directory)."""
    id_file = stack_dir / CLUSTER_ID_FILE
    if not id_file.exists():
        # The three nodes prepare at once: each links its own complete file in, the first link wins (a plain
        # exists-then-write let two nodes format with different ids: INCONSISTENT_CLUSTER_ID, a broker that exits).
        mine = stack_dir / f"{CLUSTER_ID_FILE}.{index}"
        mine.write_text(_new_cluster_id() + "\n")
        with contextlib.suppress(FileExistsError):
            os.link(mine, id_file)
        mine.unlink()
    _prepare(stack_dir, f"{NAME}-{index + 1}", _node_properties(hosts, index), id_file.read_text().strip(), [])


def probe(endpoint: str) -> str:
    """Cluster metadata through confluent-kafka's AdminClient."""
    host, port = host_port(endpoint.split(",")[0], 9092)
    if not port_open(host, port):
        raise StackError(f"nothing listens on {host}:{port}")
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": endpoint, "log_level": 0, "socket.timeout.ms": 3000})
    try:
        metadata = admin.list_topics(timeout=3)
    except Exception as exc:  # KafkaException on timeout or transport failure
        raise StackError(f"Kafka metadata request failed: {exc}") from exc
    if not metadata.brokers:
        raise StackError("Kafka answered with no brokers")
    # A restarted broker answers metadata long before its group coordinator has loaded the offsets topic;
    # consumers joining meanwhile wait (COORDINATOR_LOAD_IN_PROGRESS), so that is not ready either.
    try:
        groups = admin.list_consumer_groups(request_timeout=3).result()
    except Exception as exc:
        raise StackError(f"Kafka's group coordinator did not answer: {exc}") from exc
    if groups.errors:
        raise StackError(f"Kafka's group coordinator is not ready: {groups.errors[0]}")
    return f"{len(metadata.brokers)} broker(s), {len(metadata.topics)} topic(s)"


SPEC = ServerSpec(
    name=NAME,
    env_var="TICKWHEEL_KAFKA",
    endpoint=f"127.0.0.1:{BROKER_PORT}",
    timeout_s=90.0,
    prepare=prepare,
    command=command,
    probe=probe,
)


def node_spec(hosts: Sequence[str], index: int) -> ServerSpec:
    """Node `index` (0-based) of a cluster on `hosts`: broker and controller, node id `index + 1`."""
    name = f"{NAME}-{index + 1}"
    return ServerSpec(
        name=name,
        env_var=SPEC.env_var,
        endpoint=f"{hosts[index]}:{CLUSTER_BROKER_PORT}",
        timeout_s=180.0,
        prepare=partial(_prepare_node, hosts=hosts, index=index),
        command=partial(command, name=name, heap=tuple(_HEAP if len(hosts) == 1 else NODE_HEAP)),
        probe=probe,
    )
