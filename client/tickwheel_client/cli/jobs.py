"""`tickwheel jobs create|list|get|edit|pause|resume|delete|preview`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
import yaml

from .. import models as m
from ..errors import ApiError
from . import definitions as d
from .common import complete_job_ids, progress, session, take
from .output import FIRE_COLUMNS, JOB_COLUMNS, emit, fire_row, job_row, output_option, plain


@click.group()
def jobs() -> None:
    """Create, list, read, edit, pause, resume, delete and preview jobs."""


def definition_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The flags that write a definition, shared by create and edit."""
    options = [
        click.option("--cron", metavar="EXPR", help="a cron expression (5 or 6 fields, @daily, L W #)"),
        click.option("--tz", metavar="ZONE", help="the IANA zone of --cron (default UTC)"),
        click.option("--at", "at", metavar="INSTANT", help="once, at an RFC 3339 instant with an offset"),
        click.option("--every", metavar="DURATION", help="at an interval: 90s, 5m, 1h30m, 1d"),
        click.option("--url", help="call this URL (an HTTP target)"),
        click.option("--method", type=click.Choice([x.value for x in m.HttpMethod]), help="with --url (POST)"),
        click.option("--header", "headers", multiple=True, metavar="K=V", help="with --url; repeatable"),
        click.option("--kafka-topic", metavar="TOPIC", help="send to this Kafka topic instead"),
        click.option("--kafka-key", metavar="KEY", help="with --kafka-topic"),
        click.option("--payload", metavar="JSON|@FILE", help="the body: inline JSON, @file.json or @- (stdin)"),
        click.option("--label", "labels", multiple=True, metavar="K=V", help="repeatable"),
        click.option("--name"),
        click.option("--priority", type=click.Choice([x.value for x in m.Priority])),
        click.option("-f", "--file", "path", metavar="FILE",
                     help="the whole definition (or, for create, a list of them) in YAML or JSON; - for stdin"),
    ]  # fmt: skip
    for option in reversed(options):
        command = option(command)
    return command


def _flag_fields(flags: dict[str, Any]) -> dict[str, Any]:
    """The definition fields the flags set (schedule, target, payload, labels, name, priority)."""
    fields: dict[str, Any] = {
        "schedule": d.schedule_of(flags["cron"], flags["tz"], flags["at"], flags["every"]),
        "target": d.target_of(
            flags["url"], flags["method"], flags["headers"], flags["kafka_topic"], flags["kafka_key"]
        ),
        "payload": d.payload(flags["payload"]) if flags["payload"] is not None else None,
        "labels": d.pairs(flags["labels"], "--label") if flags["labels"] else None,
        "name": flags["name"],
        "priority": m.Priority(flags["priority"]) if flags["priority"] else None,
    }
    return {name: value for name, value in fields.items() if value is not None}


@jobs.command()
@definition_options
@click.option("--idempotency-key", metavar="KEY", help="send this key (with -f of many jobs: KEY-1, KEY-2, ...)")
@output_option
def create(output: str, path: str | None, idempotency_key: str | None, **flags: Any) -> None:
    """Create a job from flags, or from -f (one definition or a list of them).

    \b
    Examples:
      tickwheel jobs create --cron '30 9 * * MON-FRI' --tz Europe/Paris --url https://example.com/report \\
          --payload '{"report": "daily"}' --label team=billing
      tickwheel jobs create --at 2026-12-24T18:00:00Z --kafka-topic reminders --payload @reminder.json
      tickwheel jobs create --every 5m --url https://example.com/poll --name poller
      tickwheel jobs create -f jobs.yaml --idempotency-key import-2026-11 -o json
    """
    fields = _flag_fields(flags)
    if path is None:
        if "schedule" not in fields or "target" not in fields:
            raise click.UsageError("give a schedule (--cron, --at or --every) and a target (--url or --kafka-topic)")
        job = session().client().create_job(m.JobSpec(**fields), idempotency_key=idempotency_key)
        emit(job, output, columns=JOB_COLUMNS, row=job_row)
        return
    specs = [
        d.convert({**doc, **plain(fields)}, m.JobSpec, f"{path} #{i + 1}") for i, doc in enumerate(d.documents(path))
    ]
    if len(specs) == 1:
        emit(session().client().create_job(specs[0], idempotency_key=idempotency_key), output, columns=JOB_COLUMNS,
             row=job_row)  # fmt: skip
        return
    _create_many(specs, idempotency_key, output)


def _create_many(specs: list[m.JobSpec], key_prefix: str | None, output: str) -> None:
    """Create each job (a failure does not stop the rest); exit 1 when any failed."""
    client, created, failed = session().client(), [], 0
    for number, spec in enumerate(progress(specs, "creating jobs"), start=1):
        try:
            created.append(client.create_job(spec, idempotency_key=f"{key_prefix}-{number}" if key_prefix else None))
        except ApiError as exc:
            failed += 1
            click.echo(f"tickwheel: job #{number}: {exc}", err=True)
    emit(created, output, columns=JOB_COLUMNS, row=job_row)
    if failed:
        click.echo(f"tickwheel: {failed} of {len(specs)} jobs were not created", err=True)
        raise SystemExit(1)


@jobs.command(name="list")
@click.option("--state", type=click.Choice(["ACTIVE", "PAUSED"]), help="only jobs in this state")
@click.option("--label", metavar="K=V", help="only jobs with this label")
@click.option("--limit", type=click.IntRange(min=1), help="at most this many (default: all, page after page)")
@output_option
def list_(state: str | None, label: str | None, limit: int | None, output: str) -> None:
    """List your jobs (deleted ones are not listed).

    \b
    Examples:
      tickwheel jobs list
      tickwheel jobs list --state PAUSED --label team=billing -o json
    """
    if label is not None:
        d.pairs((label,), "--label")
    found = take(session().client().list_jobs(state=state, label=label, page_size=min(limit or 200, 200)), limit)
    emit(found, output, columns=JOB_COLUMNS, row=job_row)


@jobs.command()
@click.argument("job_id", shell_complete=complete_job_ids)
@output_option
def get(job_id: str, output: str) -> None:
    """Show a job with its next and last run.

    \b
    Example:
      tickwheel jobs get 6d1f0b1e-7a2c-4bb1-9b55-0c6f3c3f0a10 -o yaml
    """
    emit(session().client().get_job(job_id), output)


@jobs.command()
@click.argument("job_id", shell_complete=complete_job_ids)
@definition_options
@output_option
def edit(job_id: str, output: str, path: str | None, **flags: Any) -> None:
    """Change a job: the given flags (or -f fields) replace the stored ones; without either, open $EDITOR.

    The change is sent with If-Match set to the version just read, so a concurrent change is refused (412)
    rather than overwritten.

    \b
    Examples:
      tickwheel jobs edit 6d1f0b1e-... --cron '0 8 * * *' --tz America/New_York
      tickwheel jobs edit 6d1f0b1e-... -f patch.yaml
      tickwheel jobs edit 6d1f0b1e-...            # edit the definition as YAML
    """
    client = session().client()
    current = client.get_job(job_id)
    fields = _flag_fields(flags)
    if path is not None:
        (document,) = d.documents(path)
        fields = {**plain(d.convert(document, m.JobPatch, path)), **plain(fields)}
    elif not fields:
        fields = _edited(current)
        if not fields:
            click.echo("tickwheel: no change", err=True)
            return
    patch = d.convert(plain(fields), m.JobPatch, "the change")
    emit(client.update_job(current.id, patch, version=current.version), output)


def _edited(job: m.Job) -> dict[str, Any]:
    """The definition fields the person changed in $EDITOR."""
    before = plain(job.spec())
    text = click.edit(yaml.safe_dump(before, sort_keys=False), extension=".yaml")
    if text is None:
        return {}
    after = yaml.safe_load(text)
    if not isinstance(after, dict):
        raise click.UsageError("the edited definition must stay a mapping")
    return {name: value for name, value in after.items() if before.get(name) != value}


def _state_change(name: str, doc: str) -> click.Command:
    @click.argument("job_id", shell_complete=complete_job_ids)
    @output_option
    def change(job_id: str, output: str) -> None:
        client = session().client()
        job = client.pause_job(job_id) if name == "pause" else client.resume_job(job_id)
        emit(job, output)

    change.__doc__ = doc
    return jobs.command(name=name)(change)


_state_change("pause", "Pause a job: its scheduled run is cancelled.\n\n\b\nExample:\n  tickwheel jobs pause 6d1f...")
_state_change(
    "resume",
    "Resume a paused job from its next occurrence (catch-up as its schedule says).\n\n\b\nExample:\n"
    "  tickwheel jobs resume 6d1f...",
)


@jobs.command()
@click.argument("job_id", shell_complete=complete_job_ids)
@output_option
def delete(job_id: str, output: str) -> None:
    """Delete a job (its unstarted run is cancelled); deleting it again succeeds.

    \b
    Example:
      tickwheel jobs delete 6d1f0b1e-7a2c-4bb1-9b55-0c6f3c3f0a10
    """
    session().client().delete_job(job_id)
    emit({"id": job_id, "deleted": True} if output != "table" else f"deleted {job_id}", output)


@jobs.command()
@click.argument("job_id", shell_complete=complete_job_ids)
@click.option("-n", "--count", type=click.IntRange(1, 1000), default=10, show_default=True)
@output_option
def preview(job_id: str, count: int, output: str) -> None:
    """The next fire times, in UTC and in the schedule's zone, with DST flags.

    \b
    Example:
      tickwheel jobs preview 6d1f0b1e-7a2c-4bb1-9b55-0c6f3c3f0a10 -n 5
    """
    emit(session().client().preview_job(job_id, count), output, columns=FIRE_COLUMNS, row=fire_row)
