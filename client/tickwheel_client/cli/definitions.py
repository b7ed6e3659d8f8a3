"""Command-line flags and files into job definitions: durations, instants, payloads, labels, -f documents."""

from __future__ import annotations

import json
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click
import msgspec
import yaml

from .. import models as m

_DURATION = re.compile(r"(\d+)([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def duration_s(text: str) -> int:
    """`90`, `90s`, `5m`, `1h30m`, `2d` into seconds."""
    text = text.strip().lower()
    if text.isdigit():
        return int(text)
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise click.BadParameter(f"{text!r} is not a duration such as 90s, 5m, 1h30m or 2d")
    return sum(int(n) * _UNIT_S[u] for n, u in parts)


def instant(text: str, now: datetime | None = None) -> datetime:
    """An RFC 3339 instant with an offset, or a duration ago (`2h` means two hours before now)."""
    try:
        return (now or datetime.now(UTC)) - timedelta(seconds=duration_s(text))
    except click.BadParameter:
        pass
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is neither an instant such as 2026-01-31T09:00:00Z nor a duration"
        ) from None
    if at.tzinfo is None:
        raise click.BadParameter(f"{text!r} has no offset; add Z or +HH:MM")
    return at


def pairs(values: tuple[str, ...], what: str) -> dict[str, str]:
    """`k=v` flags into a mapping."""
    found = {}
    for value in values:
        key, sep, item = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{what} {value!r} is not key=value")
        found[key] = item
    return found


def read_text(source: str) -> str:
    """`@path` (or `@-`, standard input) is read; anything else is the text itself."""
    if not source.startswith("@"):
        return source
    name = source[1:]
    if name == "-":
        return sys.stdin.read()
    try:
        return Path(name).read_text()
    except OSError as exc:
        raise click.BadParameter(f"cannot read {name}: {exc.strerror}") from None


def payload(source: str) -> Any:
    """A JSON payload: inline, `@file.json` or `@-`."""
    text = read_text(source)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"the payload is not JSON: {exc}") from None


def documents(path: str) -> list[dict[str, Any]]:
    """A YAML or JSON file (`-` for standard input) holding one definition or a list of them."""
    text = sys.stdin.read() if path == "-" else read_text("@" + path)
    try:
        loaded = yaml.safe_load(text)  # JSON is YAML
    except yaml.YAMLError as exc:
        raise click.BadParameter(f"{path} is neither YAML nor JSON: {exc}") from None
    items = loaded if isinstance(loaded, list) else [loaded]
    if not items or not all(isinstance(item, dict) for item in items):
        raise click.BadParameter(f"{path} must hold a job definition (a mapping) or a list of them")
    return items


def convert(document: dict[str, Any], kind: type[Any], where: str) -> Any:
    """A definition document (the API's camelCase fields) into a model; a bad field is a usage error."""
    try:
        return msgspec.convert(document, type=kind)
    except msgspec.ValidationError as exc:
        raise click.BadParameter(f"{where}: {exc}") from None


def schedule_of(cron: str | None, tz: str | None, at: str | None, every: str | None) -> m.Schedule | None:
    """The schedule the flags give, or None when no schedule flag is given."""
    given = [flag for flag, value in (("--cron", cron), ("--at", at), ("--every", every)) if value]
    if len(given) > 1:
        raise click.UsageError(f"give one of --cron, --at, --every (not {' and '.join(given)})")
    if cron:
        return m.Schedule.cron(cron, tz or "UTC")
    if tz:
        raise click.UsageError("--tz goes with --cron")
    if at:
        return m.Schedule.once(at)
    if every:
        return m.Schedule.every(duration_s(every))
    return None


def target_of(
    url: str | None, method: str | None, headers: tuple[str, ...], topic: str | None, key: str | None
) -> m.Target | None:
    """The target the flags give, or None when no target flag is given."""
    if url and topic:
        raise click.UsageError("give --url or --kafka-topic, not both")
    if url:
        return m.HttpTarget(url=url, method=m.HttpMethod(method or "POST"), headers=pairs(headers, "--header"))
    if topic:
        return m.KafkaTarget(topic=topic, key=key)
    if method or headers or key:
        raise click.UsageError("--method and --header go with --url; --kafka-key with --kafka-topic")
    return None
