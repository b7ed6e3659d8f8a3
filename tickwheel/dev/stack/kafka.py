"""Apache Kafka 4.x (kafka_2.13 from Maven Central) as one KRaft broker+controller on JDK 17."""

from __future__ import annotations

import base64
import logging
import subprocess
import uuid
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

# KAFKA_JVM_PERFORMANCE_OPTS of bin/kafka-run-class.sh, with a small heap.
_JVM = [
    "-Xms512m",
    "-Xmx768m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    "-Djava.net.preferIPv4Stack=true",
]


def _paths(stack_dir: Path) -> tuple[Path, Path, Path]:
    home = server_dir(stack_dir, NAME).resolve()
    return home / "server.properties", home / "log4j2.properties", home / "data"


def _java(stack_dir: Path, *args: str) -> list[str]:
    lib = (stack_dir / "lib" / NAME).resolve()
    _, log4j2, _ = _paths(stack_dir)
    return [java_bin(), *_JVM, f"-Dlog4j2.configurationFile={log4j2}", "-cp", f"{lib}/*", *args]


def prepare(stack_dir: Path) -> None:
    """Resolve jars, write config, and format the storage once (a dynamic quorum of one: --standalone)."""
    ensure_maven_jars(stack_dir, NAME)
    props, log4j2, data = _paths(stack_dir)
    data.mkdir(parents=True, exist_ok=True)
    props.write_text(_PROPERTIES.format(data_dir=data))
    log4j2.write_text(_LOG4J2)
    if (data / "meta.properties").exists():
        return
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    argv = _java(
        stack_dir,
        "kafka.tools.StorageTool",
        "format",
        "-t",
        cluster_id,
        "-c",
        str(props),
        "--standalone",
        "--ignore-formatted",
    )
    result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if result.returncode != 0:
        raise StackError(f"kafka storage format failed:\n{(result.stdout + result.stderr)[-4000:]}")
    log.info("formatted kafka storage, cluster id %s", cluster_id)


def command(stack_dir: Path) -> list[str]:
    props, _, _ = _paths(stack_dir)
    return _java(stack_dir, "kafka.Kafka", str(props))


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
