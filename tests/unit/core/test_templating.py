"""Payload templates: placeholders in JSON string values only, every other `{{` refused with its path."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tickwheel.core.templating import TemplateError, check_template, render, variables_of

VARIABLES = variables_of(
    run_id="r-1",
    job_id="j-1",
    job_name="nightly",
    attempt=2,
    scheduled_at=datetime(2026, 3, 29, 1, 30, tzinfo=UTC),
    tz=ZoneInfo("Europe/Paris"),
)


def test_every_variable_renders_and_local_time_carries_the_zone_offset_of_that_instant():
    payload = {
        "at": "{{scheduled_at}}",
        "local": "{{ scheduled_at_local }}",
        "ids": ["{{run_id}}/{{job_id}}", "try {{attempt}} of {{job_name}}"],
    }
    assert render(payload, VARIABLES) == {
        "at": "2026-03-29T01:30:00.000+00:00",
        "local": "2026-03-29T03:30:00.000+02:00",  # after the spring-forward change at 01:00 UTC
        "ids": ["r-1/j-1", "try 2 of nightly"],
    }


def test_keys_numbers_and_the_json_shape_are_never_touched():
    payload = {"{{run_id}}": 1, "n": 2.5, "flag": True, "none": None, "nested": {"deep": ["{{attempt}}"]}}
    assert render(payload, VARIABLES) == {
        "{{run_id}}": 1, "n": 2.5, "flag": True, "none": None, "nested": {"deep": ["2"]},
    }  # fmt: skip


def test_a_rendered_value_is_text_even_when_it_looks_like_a_placeholder():
    hostile = {**VARIABLES, "job_name": "{{run_id}}"}
    assert render({"name": "{{job_name}}"}, hostile) == {"name": "{{run_id}}"}


@pytest.mark.parametrize(
    ("payload", "path"),
    [
        ({"a": "{{unknown}}"}, "payload.a"),
        ({"a": {"b": ["ok", "{{run_id"]}}, "payload.a.b[1]"),
        ({"a": "{{ }}"}, "payload.a"),
        ({"a": "{{RUN_ID}}"}, "payload.a"),
        ({"a": "{{run_id}} and {{__import__}}"}, "payload.a"),
        ("{{job_id}}{{", "payload"),
    ],
)
def test_a_template_that_does_not_parse_is_refused_with_the_path_of_its_string(payload: Any, path: str):
    with pytest.raises(TemplateError) as caught:
        check_template(payload)
    assert caught.value.path == path


def test_strings_without_placeholders_and_single_braces_pass():
    check_template({"a": "{json: 1}", "b": "}} and {", "c": ["{{run_id}}", 3]})
