"""`tickwheel runs list|get` and `tickwheel dlq list|redrive`."""

from __future__ import annotations

from typing import Any

import click
import msgspec

from .. import models as m
from ..errors import ApiError
from . import definitions as d
from .common import complete_job_ids, progress, session, take
from .output import (
    ATTEMPT_COLUMNS,
    LETTER_COLUMNS,
    RUN_COLUMNS,
    attempt_row,
    console,
    details,
    emit,
    letter_row,
    listing,
    output_option,
    run_row,
)


@click.group()
def runs() -> None:
    """A job's run history, and one run with its attempts."""


@runs.command(name="list")
@click.argument("job_id", shell_complete=complete_job_ids)
@click.option("--status", type=click.Choice([s.value for s in m.RunStatus]), help="only runs with this status")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True, help="at most this many")
@output_option
def list_runs(job_id: str, status: str | None, limit: int, output: str) -> None:
    """A job's runs, newest first.

    \b
    Examples:
      tickwheel runs list 6d1f0b1e-7a2c-4bb1-9b55-0c6f3c3f0a10
      tickwheel runs list 6d1f0b1e-7a2c-4bb1-9b55-0c6f3c3f0a10 --status DEAD -o json
    """
    found = take(session().client().list_runs(job_id, status=status, page_size=min(limit, 200)), limit)
    emit(found, output, columns=RUN_COLUMNS, row=run_row)


@runs.command(name="get")
@click.argument("run_id")
@output_option
def get_run(run_id: str, output: str) -> None:
    """One run with its attempts.

    \b
    Example:
      tickwheel runs get 0b6c4a52-3a53-4d0e-9f43-5f6a2d5d7c11
    """
    run = session().client().get_run(run_id)
    if output != "table":
        emit(run, output)
        return
    shown = console()
    shown.print(details(msgspec.structs.replace(run, attempts=[])))
    shown.print(listing(ATTEMPT_COLUMNS, [attempt_row(a) for a in run.attempts], title="attempts"))


@click.group()
def dlq() -> None:
    """Dead letters: runs that exhausted their retries, and redriving them."""


def letter_filters(command: Any) -> Any:
    for option in reversed([
        click.option("--job", "job_id", metavar="JOB_ID", help="only this job's", shell_complete=complete_job_ids),
        click.option("--target-host", metavar="HOST", help="only calls to this host"),
        click.option("--since", metavar="INSTANT|AGO", help="dead at or after (2026-11-30T00:00:00Z, or 2h, 1d ago)"),
        click.option("--until", metavar="INSTANT|AGO", help="dead before"),
    ]):  # fmt: skip
        command = option(command)
    return command


@dlq.command(name="list")
@letter_filters
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True, help="at most this many")
@output_option
def list_letters(job_id: str | None, target_host: str | None, since: str | None, until: str | None, limit: int,
                 output: str) -> None:  # fmt: skip
    """Dead letters, newest first.

    \b
    Examples:
      tickwheel dlq list --since 1d
      tickwheel dlq list --job 6d1f0b1e-7a2c-4bb1-9b55-0c6f3c3f0a10 -o json
    """
    letters = session().client().list_dead_letters(
        job_id=job_id, target_host=target_host, since=d.instant(since) if since else None,
        until=d.instant(until) if until else None, page_size=min(limit, 200),
    )  # fmt: skip
    emit(take(letters, limit), output, columns=LETTER_COLUMNS, row=letter_row)


@dlq.command()
@click.argument("run_ids", nargs=-1, metavar="[RUN_ID]...")
@letter_filters
@click.option("--dry-run", is_flag=True, help="only list what would be redriven")
@output_option
def redrive(run_ids: tuple[str, ...], job_id: str | None, target_host: str | None, since: str | None,
            until: str | None, dry_run: bool, output: str) -> None:  # fmt: skip
    """Redrive dead runs (one more attempt, same run id): the RUN_IDs given, or those the filters match.

    A run whose job is paused or deleted is skipped and reported; the exit code is then 1. Filters take at most
    the 1000 newest matches (the API's bulk limit); run the command again for older ones.

    \b
    Examples:
      tickwheel dlq redrive --job 6d1f0b1e-7a2c-4bb1-9b55-0c6f3c3f0a10 --dry-run
      tickwheel dlq redrive --since 2h
      tickwheel dlq redrive 0b6c4a52-3a53-4d0e-9f43-5f6a2d5d7c11
    """
    client = session().client()
    if run_ids and (job_id or target_host or since or until):
        raise click.UsageError("give RUN_IDs or filters, not both")
    if not run_ids:
        matched = client.redrive_many(
            job_id=job_id, target_host=target_host, since=d.instant(since) if since else None,
            until=d.instant(until) if until else None, dry_run=True,
        )  # fmt: skip
        run_ids = tuple(str(run_id) for run_id in matched.run_ids)
    if dry_run:
        emit({"dry_run": True, "matched": len(run_ids), "run_ids": list(run_ids)}, _structured(output))
        return
    redriven, skipped = [], []
    for run_id in progress(list(run_ids), "redriving"):
        try:
            redriven.append(str(client.redrive(run_id).run_id))
        except ApiError as exc:
            skipped.append({"run_id": run_id, "status": exc.status, "detail": exc.detail})
    result = {"dry_run": False, "matched": len(run_ids), "redriven": len(redriven), "run_ids": redriven,
              "skipped": skipped}  # fmt: skip
    emit(result, _structured(output))
    if skipped:
        raise SystemExit(1)


def _structured(output: str) -> str:
    """A redrive summary is a small document: tables show it as YAML."""
    return "yaml" if output == "table" else output
