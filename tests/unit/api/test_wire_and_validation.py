"""The wire format, field paths, cursors and value checks of the API (pure, no servers)."""

from __future__ import annotations

import pytest

from api.cursors import CursorSealer
from api.validation import check_definition, check_url
from api.wire import MAX_JSON_DEPTH, camel_field, decode_body, definition_document, field_of, parse_json, to_definition
from schemas.messages import HttpTarget, JobDefinition, ScheduleDoc
from tickwheel.errors import InvalidInput, PayloadTooLarge
from tickwheel.store.tenants import Tenant

TENANT = Tenant("t1", "one", None, ("secret-a",))


def body(**overrides: object) -> dict[str, object]:
    document: dict[str, object] = {
        "schedule": {"type": "cron", "expr": "0 9 * * *", "tz": "Europe/Paris"},
        "target": {"type": "http", "url": "https://example.com/x"},
        "payload": {"a": [1, 2]},
    }
    document.update(overrides)
    return document


def test_a_body_round_trips_through_the_stored_definition():
    definition = to_definition(decode_body(body(labels={"k": "v"})), 1024)
    assert definition.payload == '{"a":[1,2]}' and definition.payload_encoding == "json"
    again = to_definition(decode_body(definition_document(definition)), 1024)
    assert again == definition


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ("Expected `int`, got `str` - at `$.retryPolicy.maxAttempts`", "retryPolicy.maxAttempts"),
        ("Object contains unknown field `nope` - at `$.target`", "target.nope"),
        ("Object contains unknown field `nope`", "nope"),
        ("Object missing required field `url` - at `$.target`", "target.url"),
        ("Expected `str`, got `int` - at `$.labels[...]`", "labels"),
        ("Expected `int`, got `str` - at `$.target.successCodes[1]`", "target.successCodes[1]"),
    ],
)
def test_field_of_names_the_wire_path(message: str, field: str):
    assert field_of(message) == field


def test_core_field_names_become_camel_case():
    assert camel_field("schedule.run_at") == "schedule.runAt"
    assert camel_field("schedule.every_s") == "schedule.everyS"


def test_the_payload_limit_is_413_and_both_payload_forms_are_422():
    with pytest.raises(PayloadTooLarge):
        to_definition(decode_body(body(payload="x" * 100)), 50)
    with pytest.raises(InvalidInput) as caught:
        to_definition(decode_body(body(payloadBase64="AAAA")), 50)
    assert caught.value.field == "payloadBase64"


def test_a_cursor_opens_only_for_its_tenant_and_query():
    sealer = CursorSealer.from_secrets(("platform-secret",))
    cursor = sealer.seal("t1", "jobs|None|None", "c3RhdGU=")
    assert cursor is not None and sealer.unseal("t1", "jobs|None|None", cursor) == "c3RhdGU="
    for tenant_id, scope in [("t2", "jobs|None|None"), ("t1", "jobs|ACTIVE|None")]:
        with pytest.raises(InvalidInput):
            sealer.unseal(tenant_id, scope, cursor)
    with pytest.raises(InvalidInput):
        sealer.unseal("t1", "jobs|None|None", "!!not base64!!")
    assert sealer.seal("t1", "x", None) is None and sealer.unseal("t1", "x", None) is None


def test_cursors_are_keyed_by_the_platform_secret_not_by_anything_a_tenant_holds():
    import base64
    import hashlib
    import hmac

    # the old scheme: HMAC keyed by sha256("cursor:" + the tenant's oldest webhook signing secret)
    webhook_secret = "whsec_known-to-every-receiver"
    key = hashlib.sha256(b"cursor:" + webhook_secret.encode()).digest()
    state = b"forged-paging-state"
    forged = base64.urlsafe_b64encode(hmac.new(key, b"jobs\0" + state, hashlib.sha256).digest()[:12] + state)
    with pytest.raises(InvalidInput):
        CursorSealer.from_secrets(("platform-secret",)).unseal("t1", "jobs", forged.decode().rstrip("="))


def test_a_rotated_cursor_secret_still_opens_cursors_sealed_with_the_previous_one():
    old = CursorSealer.from_secrets(("secret-1",))
    rotated = CursorSealer.from_secrets(("secret-2", "secret-1"))
    cursor = old.seal("t1", "jobs", "state")
    assert rotated.unseal("t1", "jobs", cursor) == "state"
    fresh = rotated.seal("t1", "jobs", "state")
    assert fresh != cursor and CursorSealer.from_secrets(("secret-2",)).unseal("t1", "jobs", fresh) == "state"
    with pytest.raises(InvalidInput):
        CursorSealer.from_secrets(("secret-2",)).unseal("t1", "jobs", cursor)  # the old secret was dropped


def test_without_configured_secrets_each_process_draws_its_own():
    assert CursorSealer.from_secrets(()).keys != CursorSealer.from_secrets(()).keys


@pytest.mark.parametrize(
    "url",
    ["ftp://h/x", "https://", "https://u:p@h/x", "https://h/a b", "https://h:0/x", "http://h:99999/x", "h/x"],
)
def test_bad_urls_are_refused(url: str):
    with pytest.raises(InvalidInput):
        check_url(url, "target.url")


def test_a_valid_definition_gives_its_core_schedule_and_bad_values_name_their_field():
    definition = JobDefinition(
        schedule=ScheduleDoc(type="cron", expr="0 9 * * *", tz="Europe/Paris"), target=HttpTarget(url="https://h/x")
    )
    assert check_definition(definition, min_interval_s=60, kafka_topic_prefix="t1.").expr == "0 9 * * *"  # type: ignore[union-attr]
    bad = JobDefinition(schedule=ScheduleDoc(type="once"), target=HttpTarget(url="https://h/x"))
    with pytest.raises(InvalidInput) as caught:
        check_definition(bad, min_interval_s=60, kafka_topic_prefix="t1.")
    assert caught.value.field == "schedule.runAt"


def checked(**overrides: object) -> None:
    check_definition(
        to_definition(decode_body(body(**overrides)), 1 << 20), min_interval_s=60, kafka_topic_prefix="t1."
    )


def field_refused(**overrides: object) -> str | None:
    with pytest.raises(InvalidInput) as caught:
        checked(**overrides)
    return caught.value.field


@pytest.mark.parametrize(
    ("target", "field"),
    [
        ({"maxConcurrency": -1}, "target.maxConcurrency"),
        ({"maxConcurrency": 0}, "target.maxConcurrency"),
        ({"ratePerS": -1}, "target.ratePerS"),
        ({"ratePerS": 0}, "target.ratePerS"),
        ({"ratePerS": float("nan")}, "target.ratePerS"),
        ({"timeoutS": 0.000001}, "target.timeoutS"),
        ({"timeoutS": 0.999}, "target.timeoutS"),
        ({"timeoutS": float("nan")}, "target.timeoutS"),
    ],
)
def test_non_positive_limits_and_sub_second_timeouts_are_refused(target: dict[str, object], field: str):
    assert field_refused(target={"type": "http", "url": "https://example.com/x", **target}) == field


def test_positive_limits_and_a_one_second_timeout_are_accepted():
    checked(target={"type": "http", "url": "https://e.com/x", "maxConcurrency": 1, "ratePerS": 0.5, "timeoutS": 1})


@pytest.mark.parametrize(
    "name",
    [
        "Transfer-Encoding", "transfer-encoding", "Content-Length", "Host", "Connection", "Keep-Alive", "TE",
        "Trailer", "Upgrade", "Proxy-Authorization", "Proxy-Connection", "webhook-signature", "Webhook-Id",
        "Idempotency-Key", "X-Tickwheel-Attempt", "x-tickwheel-anything",
    ],
)  # fmt: skip
def test_hop_by_hop_framing_and_platform_headers_are_refused(name: str):
    target = {"type": "http", "url": "https://example.com/x", "headers": {name: "v"}}
    assert field_refused(target=target) == f"target.headers.{name}"


@pytest.mark.parametrize("value", ["a\x0bb", "a\x7fb", "a\rb", "a\nb", "a\x00b", "caf\u00e9", "a\x1bb"])
def test_control_characters_in_header_values_are_refused(value: str):
    target = {"type": "http", "url": "https://example.com/x", "headers": {"X-Value": value}}
    assert field_refused(target=target) == "target.headers.X-Value"


def test_ordinary_headers_are_accepted():
    checked(target={"type": "http", "url": "https://e.com/x", "headers": {"Authorization": "Bearer a\tb c~"}})


@pytest.mark.parametrize("topic", ["t2.orders", "t1", "t1.", "t1x.orders", "tickwheel.runs.default"])
def test_a_kafka_topic_outside_the_tenants_prefix_is_refused(topic: str):
    assert field_refused(target={"type": "kafka", "topic": topic}) == "target.topic"


def test_a_kafka_topic_inside_the_tenants_prefix_is_accepted():
    checked(target={"type": "kafka", "topic": "t1.orders"})


def test_the_payload_limit_counts_bytes_not_characters():
    with pytest.raises(PayloadTooLarge):
        to_definition(decode_body(body(payload="\u00e9" * 40)), 50)  # 40 characters, 82 bytes encoded
    to_definition(decode_body(body(payload="e" * 40)), 50)


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 1_000, 100_000])
def test_deeply_nested_json_is_422_naming_the_top_level_field(depth: int):
    document = b'{"schedule": {}, "payload": ' + b"[" * depth + b"]" * depth + b"}"
    with pytest.raises(InvalidInput) as caught:
        parse_json(document)
    assert caught.value.field == "payload"


def test_json_nested_up_to_the_limit_is_accepted():
    parse_json(b'{"payload": ' + b"[" * (MAX_JSON_DEPTH - 1) + b"]" * (MAX_JSON_DEPTH - 1) + b"}")


@pytest.mark.parametrize(
    ("schedule", "field"),
    [
        ({"type": "once", "runAt": "9999-12-31T23:59:59-14:00"}, "schedule.runAt"),
        ({"type": "once", "runAt": "9999-12-31T23:59:59Z"}, "schedule.runAt"),
        ({"type": "interval", "everyS": 3600, "startAt": "9999-12-31T20:00:00Z"}, "schedule.startAt"),
        ({"type": "interval", "everyS": 3600, "anchorAt": "9999-12-31T20:00:00Z"}, "schedule.anchorAt"),
        ({"type": "cron", "expr": "0 0 * * *", "endAt": "9999-12-31T23:59:59Z"}, "schedule.endAt"),
    ],
)
def test_instants_near_year_9999_are_422_naming_the_field(schedule: dict[str, object], field: str):
    assert field_refused(schedule=schedule) == field
