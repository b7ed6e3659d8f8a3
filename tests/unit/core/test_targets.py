"""What a tenant's target may carry, on its own: header rules and Kafka topic prefixes."""

from __future__ import annotations

import pytest

from tickwheel.core.targets import header_refusal, topic_prefix_refusal, topic_refusal


def test_a_prefix_without_its_dot_is_refused_so_acme_cannot_reach_acme2():
    assert topic_prefix_refusal("acme") is not None
    assert topic_refusal("acme2.orders", "acme") is not None
    assert topic_refusal("acme2.orders", "acme.") is not None
    assert topic_refusal("acme.orders", "acme.") is None


@pytest.mark.parametrize("prefix", ["tickwheel.", "tickwheel.runs.", "TickWheel."])
def test_the_platforms_own_prefix_is_never_a_tenants(prefix: str):
    assert topic_prefix_refusal(prefix) is not None
    assert topic_refusal(f"{prefix}default", prefix) is not None


def test_the_platforms_topics_under_a_deployment_prefix_are_refused():
    assert topic_refusal("prod.tickwheel.runs.urgent", "prod.", platform_topics="prod.tickwheel.") is not None
    assert topic_refusal("prod.orders", "prod.", platform_topics="prod.tickwheel.") is None


def test_the_prefix_alone_is_not_a_topic():
    assert topic_refusal("acme.", "acme.") is not None


@pytest.mark.parametrize(("name", "value"), [("TE", "trailers"), ("Expect", "100-continue"), ("X-A", "\t ok ~")])
def test_header_rules(name: str, value: str):
    assert (header_refusal(name, value) is None) == (name == "X-A")
