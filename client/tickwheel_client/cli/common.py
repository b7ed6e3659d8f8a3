"""What every command shares: the session (global options and the client), error exits, paging, progress."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator, Sequence
from typing import NoReturn, TypeVar

import click
from click.shell_completion import CompletionItem
from rich.console import Console
from rich.progress import Progress

from ..config import Config
from ..errors import ApiError, TickwheelClientError
from ..retry import NO_RETRIES
from ..sync import Client

T = TypeVar("T")
EXIT_API_ERROR = 1
EXIT_USAGE = 2


@dataclasses.dataclass
class Session:
    """The global options, and the one client a command uses (made when first needed)."""

    profile: str | None
    api_url: str | None
    made: Client | None = None

    def client(self) -> Client:
        if self.made is None:
            self.made = Client(Config.load(self.profile, api_url=self.api_url))
        return self.made


def session() -> Session:
    found: Session = click.get_current_context().find_object(Session)  # type: ignore[assignment]
    return found


def fail(error: TickwheelClientError, output: str = "table") -> NoReturn:
    """Print an API error (the problem as JSON when the output is json) and exit 1."""
    if isinstance(error, ApiError) and output == "json":
        click.echo(json.dumps(error.problem()), err=True)
    else:
        click.echo(f"tickwheel: {error}", err=True)
    raise SystemExit(EXIT_API_ERROR)


def progress(items: Sequence[T], label: str) -> Iterator[T]:
    """Iterate with a progress bar on stderr (shown on a terminal only), so stdout stays parseable."""
    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=len(items))
        for item in items:
            yield item
            bar.advance(task)


COMPLETION_TIMEOUT_S = 2.0
COMPLETION_LIMIT = 200


def complete_job_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of a JOB_ID: the tenant's job ids (named in the help column), asked of the API once,
    quickly and without retries; any failure completes nothing rather than break the shell."""
    given = ctx.find_root().params  # completion parses the options but runs no command, so no Session exists
    try:
        config = Config.load(given.get("profile"), api_url=given.get("api_url"))
        quick = Config(config.api_url, config.api_key, COMPLETION_TIMEOUT_S)
        with Client(quick, retries=NO_RETRIES) as tw:
            jobs = take(tw.list_jobs(page_size=COMPLETION_LIMIT), COMPLETION_LIMIT)
    except (TickwheelClientError, ValueError):
        return []
    return [CompletionItem(str(job.id), help=job.name) for job in jobs if str(job.id).startswith(incomplete)]


def take(items: Iterable[T], limit: int | None) -> list[T]:
    """At most `limit` items of an iterator that pages lazily."""
    found: list[T] = []
    for item in items:
        if limit is not None and len(found) >= limit:
            break
        found.append(item)
    return found
