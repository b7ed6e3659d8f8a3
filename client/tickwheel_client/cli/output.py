"""How answers are shown: a rich table for people, JSON (the API's own shape, stable) or YAML for scripts."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import click
import msgspec
import yaml
from rich.console import Console
from rich.table import Table

from .. import models as m

FORMATS = ("table", "json", "yaml")
OUTPUT_KEY = "tickwheel.output"  # in click's context meta, so an error is printed in the chosen format
Row = Callable[[Any], Sequence[str]]


def output_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """`-o/--output table|json|yaml` on a command."""

    def remember(ctx: click.Context, param: click.Parameter, value: str) -> str:
        ctx.meta[OUTPUT_KEY] = value
        return value

    return click.option(
        "-o", "--output", type=click.Choice(FORMATS), default="table", show_default=True, callback=remember,
        is_eager=True, help="table for people; json (the API's shape) or yaml for scripts",
    )(command)  # fmt: skip


def plain(value: Any) -> Any:
    """Models as JSON values under the API's field names."""
    return msgspec.to_builtins(value)


def emit(value: Any, output: str, *, columns: Sequence[str] = (), row: Row | None = None) -> None:
    """Print one model or a list of them."""
    if output == "json":
        click.echo(json.dumps(plain(value), indent=2))
    elif output == "yaml":
        click.echo(yaml.safe_dump(plain(value), sort_keys=False, allow_unicode=True), nl=False)
    elif isinstance(value, str):
        click.echo(value)
    elif isinstance(value, list):
        console().print(listing(columns, [row(item) if row else [str(item)] for item in value]))
    else:
        console().print(details(value))


PIPED_WIDTH = 240  # a table written to a pipe or file is not cut to 80 columns


def console() -> Console:
    """stdout; at the terminal's width, or wide when piped (so ids are never cut)."""
    return Console(width=None if sys.stdout.isatty() else PIPED_WIDTH)


def listing(columns: Sequence[str], rows: Sequence[Sequence[str]], title: str | None = None) -> Table:
    """A table whose id columns never wrap or shorten."""
    table = Table(box=None, header_style="bold", title=title, title_justify="left")
    for name in columns:
        is_id = name.endswith("ID")
        table.add_column(name, no_wrap=is_id, min_width=36 if is_id else None)
    for values in rows:
        table.add_row(*values)
    return table


def details(value: Any) -> Table:
    """One model as a two-column table; nested values as compact JSON."""
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    for name, item in plain(value).items():
        table.add_row(name, item if isinstance(item, str) else json.dumps(item))
    return table


def when(at: datetime | None) -> str:
    return "-" if at is None else at.isoformat(timespec="seconds")


def schedule_text(schedule: m.Schedule) -> str:
    if schedule.type is m.ScheduleType.CRON:
        return f"cron {schedule.expr} {schedule.tz}"
    if schedule.type is m.ScheduleType.INTERVAL:
        return f"every {schedule.every_s}s"
    return f"at {schedule.run_at}"


def target_text(target: m.Target) -> str:
    if isinstance(target, m.KafkaTarget):
        return f"kafka:{target.topic}"
    return f"{target.method.value} {target.url}"


JOB_COLUMNS = ("ID", "NAME", "STATE", "SCHEDULE", "TARGET", "NEXT RUN", "VERSION")


def job_row(job: m.Job) -> Sequence[str]:
    return (str(job.id), job.name or "", job.state.value, schedule_text(job.schedule), target_text(job.target),
            when(job.next_run_at), str(job.version))  # fmt: skip


RUN_COLUMNS = ("ID", "STATUS", "ATTEMPT", "SCHEDULED", "UPDATED")


def run_row(run: m.RunSummary) -> Sequence[str]:
    return (str(run.id), run.status.value, str(run.attempt), when(run.scheduled_at), when(run.updated_at))


LETTER_COLUMNS = ("RUN ID", "JOB ID", "DEAD AT", "HOST", "LAST ERROR", "REDRIVEN")


def letter_row(letter: m.DeadLetter) -> Sequence[str]:
    return (str(letter.run_id), str(letter.job_id), when(letter.dead_at), letter.target_host or "",
            (letter.last_error or "")[:60], when(letter.redriven_at))  # fmt: skip


FIRE_COLUMNS = ("AT (UTC)", "LOCAL", "DST")


def fire_row(fire: m.Fire) -> Sequence[str]:
    return (when(fire.at), fire.local.isoformat(), fire.dst.value if fire.dst else "")


ATTEMPT_COLUMNS = ("ATTEMPT", "KIND", "OUTCOME", "CODE", "STARTED", "FINISHED", "ERROR")


def attempt_row(attempt: m.Attempt) -> Sequence[str]:
    code = "" if attempt.response_code is None else str(attempt.response_code)
    return (str(attempt.attempt), attempt.kind, attempt.outcome or "", code, when(attempt.started_at),
            when(attempt.finished_at), (attempt.error or "")[:60])  # fmt: skip
