"""Payload templates: `{{name}}` placeholders in the JSON string values of a payload, and nothing else.

A template is data, never code: the only placeholders are the names in VARIABLES, substituted as plain text
inside string values (object keys, numbers and the JSON structure are never touched), so a rendered payload is
always valid JSON of the same shape. Any `{{` that does not open a known placeholder is an error, reported at
create time with the JSON path of the string (e.g. `payload.meta.when`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any

from tickwheel.core.instants import format_instant

VARIABLES = ("scheduled_at", "scheduled_at_local", "run_id", "attempt", "job_id", "job_name")

_PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")


@dataclass(frozen=True, slots=True)
class TemplateError(Exception):
    """A string value of the payload that is not a valid template; `path` is its JSON path."""

    path: str
    message: str


def check_template(value: Any, path: str = "payload") -> None:
    """Raise TemplateError for the first string value (depth first) whose placeholders do not parse."""
    if isinstance(value, str):
        _check_string(value, path)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_template(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_template(item, f"{path}[{index}]")


def render(value: Any, variables: Mapping[str, str]) -> Any:
    """`value` with every placeholder in its string values replaced by its variable (a checked template)."""
    if isinstance(value, str):
        return _PLACEHOLDER.sub(lambda m: variables[m[1]], value) if "{{" in value else value
    if isinstance(value, dict):
        return {key: render(item, variables) for key, item in value.items()}
    if isinstance(value, list):
        return [render(item, variables) for item in value]
    return value


def _check_string(text: str, path: str) -> None:
    position = 0
    while (start := text.find("{{", position)) >= 0:
        match = _PLACEHOLDER.match(text, start)
        if match is None:
            raise TemplateError(path, f"'{{{{' at character {start} does not open a placeholder like {{{{run_id}}}}")
        if match[1] not in VARIABLES:
            known = ", ".join(VARIABLES)
            raise TemplateError(path, f"unknown placeholder {{{{{match[1]}}}}}; the known ones are {known}")
        position = match.end()


def variables_of(
    *, run_id: str, job_id: str, job_name: str | None, attempt: int, scheduled_at: datetime, tz: tzinfo
) -> dict[str, str]:
    """The values of every placeholder for one attempt of a run; `tz` is the job's zone (UTC for once jobs)."""
    return {
        "scheduled_at": format_instant(scheduled_at),
        "scheduled_at_local": format_instant(scheduled_at, tz),
        "run_id": run_id,
        "attempt": str(attempt),
        "job_id": job_id,
        "job_name": job_name or "",
    }
