"""How the Kafka adapter configures its data-plane clients: no Nagle, fetches that wait for a little data (each
lane as its flow needs)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tickwheel.bus import kafka
from tickwheel.settings import KafkaSettings, build
from worker.consumer import lane_fetch


class Recorded:
    """Stands in for the C client's classes: keeps the configuration it was made with."""

    made: list[dict[str, Any]] = []

    def __init__(self, config: dict[str, Any]) -> None:
        Recorded.made.append(config)

    def poll(self, timeout: float) -> int:
        """The producer's poll thread calls it until the producer closes."""
        time.sleep(timeout)
        return 0


def test_the_producer_and_the_consumer_disable_nagle(monkeypatch: pytest.MonkeyPatch) -> None:
    # librdkafka leaves Nagle on: a request written behind an unacknowledged one waits for the broker's delayed ACK.
    monkeypatch.setattr(kafka, "Producer", Recorded)
    monkeypatch.setattr(kafka, "Consumer", Recorded)
    Recorded.made = []
    settings = KafkaSettings(bootstrap="127.0.0.1:9092")
    producer = kafka.KafkaProducer(settings, linger_ms=1)
    producer._closing.set()  # its poll thread stops
    kafka.KafkaConsumer(settings, group_id="g", extra={"fetch.wait.max.ms": 100})
    assert len(Recorded.made) == 2
    assert all(config["socket.nagle.disable"] is True for config in Recorded.made)
    assert Recorded.made[1]["fetch.wait.max.ms"] == 100  # what a caller adds still reaches the client


def test_a_consumer_fetches_with_the_configured_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    # librdkafka's defaults answer a fetch per message under a steady flow; the broker's cost is per fetch.
    monkeypatch.setattr(kafka, "Consumer", Recorded)
    Recorded.made = []
    kafka.KafkaConsumer(KafkaSettings(fetch_wait_ms=7, fetch_min_bytes=1234), group_id="g")
    assert Recorded.made[0]["fetch.wait.max.ms"] == 7
    assert Recorded.made[0]["fetch.min.bytes"] == 1234
    assert KafkaSettings().fetch_wait_ms == 20  # the default measured (BENCHMARKS.md "Kafka's fetches wait 20 ms")


def test_a_consumer_may_fetch_with_its_own_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka, "Consumer", Recorded)
    Recorded.made = []
    kafka.KafkaConsumer(KafkaSettings(fetch_wait_ms=7, fetch_min_bytes=1234), fetch_wait_ms=500, fetch_min_bytes=1)
    assert (Recorded.made[0]["fetch.wait.max.ms"], Recorded.made[0]["fetch.min.bytes"]) == (500, 1)


def test_the_lanes_fetch_each_as_its_flow_needs() -> None:
    # The default lane waits a little for a burst; the urgent lane is answered at its first message and asks rarely
    # when idle; the bulk lane asks rarely and its runs may wait (every fetch is a broker request, data or not).
    settings = build({"TICKWHEEL_KAFKA_FETCH_WAIT_MS": "20", "TICKWHEEL_KAFKA_FETCH_MIN_BYTES": "65536"})
    assert lane_fetch(settings, "default") == (20, 65_536)
    assert lane_fetch(settings, "urgent") == (500, 1)
    assert lane_fetch(settings, "bulk") == (250, 65_536)
    tuned = build({"TICKWHEEL_WORKER_URGENT_FETCH_WAIT_MS": "100", "TICKWHEEL_WORKER_BULK_FETCH_WAIT_MS": "40"})
    assert lane_fetch(tuned, "urgent")[0] == 100
    assert lane_fetch(tuned, "bulk")[0] == 40
