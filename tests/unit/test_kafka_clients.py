"""How the Kafka adapter configures its data-plane clients: no Nagle, fetches that wait for a little data."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tickwheel.bus import kafka
from tickwheel.settings import KafkaSettings


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
