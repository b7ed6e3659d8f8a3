"""The wire format, field paths, cursors and value checks of the API (pure, no servers)."""

from __future__ import annotations

import pytest

from api.cursors import seal, unseal
from api.validation import check_definition, check_url
from api.wire import camel_field, decode_body, definition_document, field_of, to_definition
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
    cursor = seal(TENANT, "jobs|None|None", "c3RhdGU=")
    assert cursor is not None and unseal(TENANT, "jobs|None|None", cursor) == "c3RhdGU="
    for tenant, scope in [(Tenant("t2", "two", None, ("secret-b",)), "jobs|None|None"), (TENANT, "jobs|ACTIVE|None")]:
        with pytest.raises(InvalidInput):
            unseal(tenant, scope, cursor)
    with pytest.raises(InvalidInput):
        unseal(TENANT, "jobs|None|None", "!!not base64!!")
    assert seal(TENANT, "x", None) is None and unseal(TENANT, "x", None) is None


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
    assert check_definition(definition, min_interval_s=60).expr == "0 9 * * *"  # type: ignore[union-attr]
    bad = JobDefinition(schedule=ScheduleDoc(type="once"), target=HttpTarget(url="https://h/x"))
    with pytest.raises(InvalidInput) as caught:
        check_definition(bad, min_interval_s=60)
    assert caught.value.field == "schedule.runAt"
