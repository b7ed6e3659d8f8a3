"""`tickwheel jobs apply|trigger|skip|pause-until|backfill`: named jobs and runs outside the schedule."""

from __future__ import annotations

import click

from .. import models as m
from . import definitions as d
from .common import complete_job_ids, session
from .jobs import jobs
from .output import emit, output_option


@jobs.command()
@click.argument("name")
@click.option("-f", "--file", "path", required=True, metavar="FILE", help="the definition (YAML or JSON); - for stdin")
@click.option("--create-only", is_flag=True, help="fail (412) if a job of this name exists")
@output_option
def apply(name: str, path: str, create_only: bool, output: str) -> None:
    """Create or replace the job called NAME from a file; the same file again changes nothing.

    \b
    Example:
      tickwheel jobs apply nightly-report -f nightly-report.yaml
    """
    (document,) = d.documents(path)
    spec = d.convert(document, m.JobSpec, path)
    emit(session().client().put_job_by_name(name, spec, create_only=create_only), output)


@jobs.command()
@click.argument("job_id", shell_complete=complete_job_ids)
@click.option("--at", "at", metavar="INSTANT", help="run at this instant (at most 7 days ahead) instead of now")
@click.option("--force", is_flag=True, help="run even though the job is paused")
@output_option
def trigger(job_id: str, at: str | None, force: bool, output: str) -> None:
    """One extra run now (or --at), outside the schedule.

    \b
    Examples:
      tickwheel jobs trigger 6d1f0b1e-...
      tickwheel jobs trigger 6d1f0b1e-... --at 2026-12-24T18:00:00Z --force
    """
    at_instant = None if at is None else d.instant(at)
    emit(session().client().trigger_job(job_id, at=at_instant, force=force), output)


@jobs.command()
@click.argument("job_id", shell_complete=complete_job_ids)
@click.option("-n", "--count", type=click.IntRange(1, 100), help="skip the next N occurrences")
@click.option("--occurrence", metavar="INSTANT", help="skip this one upcoming occurrence")
@output_option
def skip(job_id: str, count: int | None, occurrence: str | None, output: str) -> None:
    """Skip occurrences without changing the schedule's expression.

    \b
    Examples:
      tickwheel jobs skip 6d1f0b1e-... -n 2
      tickwheel jobs skip 6d1f0b1e-... --occurrence 2026-12-24T08:00:00Z
    """
    if (count is None) == (occurrence is None):
        raise click.UsageError("give either --count or --occurrence")
    when = None if occurrence is None else d.instant(occurrence)
    emit(session().client().skip_occurrences(job_id, count=count, occurrence=when), output)


@jobs.command(name="pause-until")
@click.argument("job_id", shell_complete=complete_job_ids)
@click.argument("until")
@output_option
def pause_until(job_id: str, until: str, output: str) -> None:
    """Nothing fires before UNTIL; the job goes on by itself afterwards.

    \b
    Example:
      tickwheel jobs pause-until 6d1f0b1e-... 2026-12-27T08:00:00Z
    """
    emit(session().client().pause_until(job_id, d.instant(until)), output)


@jobs.command()
@click.argument("job_id", shell_complete=complete_job_ids)
@click.option("--from", "start", required=True, metavar="INSTANT", help="the range's start (or a duration ago: 6h)")
@click.option("--to", "end", required=True, metavar="INSTANT", help="the range's end, excluded (not in the future)")
@click.option("--dry-run", is_flag=True, help="only list the runs")
@output_option
def backfill(job_id: str, start: str, end: str, dry_run: bool, output: str) -> None:
    """Make now the runs the schedule would have made in [--from, --to) (at most 1000).

    \b
    Example:
      tickwheel jobs backfill 6d1f0b1e-... --from 2026-12-01T00:00:00Z --to 2026-12-02T00:00:00Z --dry-run
    """
    emit(session().client().backfill(job_id, d.instant(start), d.instant(end), dry_run=dry_run), output)
