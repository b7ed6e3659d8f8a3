"""The wire format of jobs: request bodies into `schemas.messages.JobDefinition`, and jobs back into JSON.

Definition fields are camelCase, exactly as `JobDefinition` stores them (its codec renames to camel), except
the payload: on the wire it is any JSON value (`payload`) or base64 bytes (`payloadBase64`); stored, it is a
string with its encoding. Fields the server computes (`id`, `state`, `version`, `next_run_at`, ...) are
snake_case, as the HTTP contract fixes them.
"""

from __future__ import annotations

import base64
import binascii
import re
from datetime import datetime
from typing import Any

import msgspec

from schemas.messages import AsyncCompletionDoc, JobDefinition, Lane, NotifyDoc, RetryDoc, ScheduleDoc, Target
from tickwheel.core.instants import format_instant
from tickwheel.errors import InvalidInput, MalformedRequest, PayloadTooLarge


class JobBody(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    """A create (or a PATCH merged over the stored job) as the client sends it."""

    schedule: ScheduleDoc
    target: Target
    payload: Any = None  # any JSON value; null (or absent) means no payload
    payload_base64: str | None = None
    payload_template: bool = False
    retry_policy: RetryDoc = RetryDoc()
    delay_tolerance_s: int = 0
    priority: Lane = "default"
    labels: dict[str, str] = {}
    alert_url: str | None = None
    name: str | None = None
    notify: NotifyDoc | None = None
    async_completion: AsyncCompletionDoc | None = None


MAX_JSON_DEPTH = 64
_JSON_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')
_PATH = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_UNKNOWN = re.compile(r"Object contains unknown field `(?P<name>[^`]+)`")
_MISSING = re.compile(r"Object missing required field `(?P<name>[^`]+)`")


def field_of(message: str) -> str | None:
    """The JSON path (e.g. `target.headers`) a msgspec validation message points at."""
    match = _PATH.search(message)
    path = match["path"].lstrip(".").replace("[...]", "") if match else ""  # msgspec hides map keys
    named = _UNKNOWN.search(message) or _MISSING.search(message)
    if named:
        path = f"{path}.{named['name']}" if path else named["name"]
    return path or None


def camel_field(field: str) -> str:
    """`schedule.run_at` -> `schedule.runAt`: the core names fields in snake_case, the wire in camelCase."""
    return ".".join(re.sub(r"_([a-z0-9])", lambda m: m[1].upper(), part) for part in field.split("."))


def parse_json(body: bytes) -> Any:
    """Any JSON document nested at most MAX_JSON_DEPTH deep, or 400 when it is not JSON (422 naming the
    top-level field whose value is nested too deep)."""
    if not body.strip():
        raise MalformedRequest("the request body is empty; send a JSON document")
    try:
        document = msgspec.json.decode(body)
    except RecursionError:  # ~1000 levels: the decoder gives up before we could count
        raise _too_deep(_deepest_field(body)) from None
    except msgspec.DecodeError as exc:
        raise MalformedRequest(f"the request body is not valid JSON: {exc}") from None
    deep = too_deep_at(document, MAX_JSON_DEPTH)
    if deep is not None:
        raise _too_deep(deep or None)
    return document


def too_deep_at(document: Any, limit: int) -> str | None:
    """The top-level key under which `document` nests deeper than `limit` ('' for the root), or None."""
    stack: list[tuple[Any, int, str]] = [(document, 0, "")]
    while stack:
        node, depth, top = stack.pop()
        if depth > limit:
            return top
        if isinstance(node, dict):
            stack.extend((value, depth + 1, str(key) if depth == 0 else top) for key, value in node.items())
        elif isinstance(node, list):
            stack.extend((value, depth + 1, top) for value in node)
    return None


def _deepest_field(body: bytes) -> str | None:
    """The top-level key whose value nests too deep, read from the tokens (the decoders recurse, so a body they
    cannot decode is scanned for strings and brackets only)."""
    depth, key = 0, None
    for token in _JSON_TOKENS.finditer(body):
        text = token.group()
        if text in (b"[", b"{"):
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return key
        elif text in (b"]", b"}"):
            depth -= 1
        elif depth == 1:
            key = text[1:-1].decode(errors="replace")
    return None


def _too_deep(field: str | None) -> InvalidInput:
    return InvalidInput(f"JSON nested deeper than {MAX_JSON_DEPTH} levels is not accepted", field=field)


def decode_body(document: dict[str, Any]) -> JobBody:
    """Type-check a parsed JSON object as a job body (422 naming the field at fault)."""
    try:
        return msgspec.convert(document, type=JobBody, str_keys=True)
    except msgspec.ValidationError as exc:
        message = str(exc)
        raise InvalidInput(_readable(message), field=field_of(message)) from None


def _readable(message: str) -> str:
    return _PATH.sub(lambda m: f" (at {m['path'].lstrip('.')})" if m["path"] else "", message)


def to_definition(body: JobBody, max_payload_bytes: int) -> JobDefinition:
    """The stored definition of a checked body; the payload size limit gives 413."""
    payload, encoding = _payload_of(body)
    size = len(payload.encode()) if encoding == "json" else len(base64.b64decode(payload))
    if size > max_payload_bytes:
        raise PayloadTooLarge(f"the payload is {size} bytes; the limit is {max_payload_bytes} bytes", field="payload")
    return JobDefinition(
        schedule=body.schedule,
        target=body.target,
        payload=payload,
        payload_encoding=encoding,
        payload_template=body.payload_template,
        retry_policy=body.retry_policy,
        delay_tolerance_s=body.delay_tolerance_s,
        priority=body.priority,
        labels=body.labels,
        alert_url=body.alert_url,
        name=body.name,
        notify=body.notify,
        async_completion=body.async_completion,
    )


def _payload_of(body: JobBody) -> tuple[str, Any]:
    if body.payload_base64 is not None:
        if body.payload is not None:
            raise InvalidInput("send either payload or payloadBase64, not both", field="payloadBase64")
        try:
            base64.b64decode(body.payload_base64, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput("payloadBase64 is not valid base64", field="payloadBase64") from None
        return body.payload_base64, "base64"
    return ("" if body.payload is None else msgspec.json.encode(body.payload).decode()), "json"


def definition_document(definition: JobDefinition) -> dict[str, Any]:
    """The definition as the client sees (and may send back) it."""
    document: dict[str, Any] = msgspec.to_builtins(definition)
    payload = document.pop("payload", "")
    encoding = document.pop("payloadEncoding", "json")
    if encoding == "base64":
        document["payloadBase64"] = payload
    elif payload:
        document["payload"] = msgspec.json.decode(payload)
    return document


def instant(at: datetime | None) -> str | None:
    """RFC 3339 with an explicit offset (UTC), millisecond precision."""
    return None if at is None else format_instant(at)
