"""The `tickwheel` front door: the tenant commands (jobs, runs, dlq, completion) and, when the server package
is installed beside this one, its commands too.

Both distributions install a `tickwheel` script: this one (`tickwheel_client.cli.main:main`) and the server's
(`tickwheel.cli:main`). Each hands the other's commands over, so whichever script a shared virtualenv ends up
with, `tickwheel` offers every installed command; a tenant's machine has only the client's.

Exit codes: 0 done, 1 the API answered an error (its problem printed on stderr) or could not be reached,
2 bad usage or configuration.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from typing import Any

import click
from click.shell_completion import get_completion_class

from ..errors import ApiError, ConfigError, ConnectionFailed
from .common import EXIT_API_ERROR, EXIT_USAGE, Session, fail
from .jobs import jobs
from .output import OUTPUT_KEY
from .runs import dlq, runs
from .schedules import apply  # noqa: F401  (registers apply, trigger, skip, pause-until, backfill on jobs)

SERVER_CLI = "tickwheel.cli"


def _server_commands() -> dict[str, str]:
    """The server CLI's commands and their help, when the server package is installed."""
    if importlib.util.find_spec("tickwheel") is None or importlib.util.find_spec(SERVER_CLI) is None:
        return {}
    listed: Callable[[], dict[str, str]] = importlib.import_module(SERVER_CLI).server_commands
    return listed()


class Front(click.Group):
    """The tenant commands, then the server's (handed its arguments untouched); errors become exit codes."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_server_commands()})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        found = super().get_command(ctx, name)
        if found is not None:
            return found
        server = _server_commands()
        if name not in server:
            return None

        @click.pass_context
        def run_server(ctx: click.Context) -> None:
            raise SystemExit(importlib.import_module(SERVER_CLI).main([name, *ctx.args]))

        return click.Command(
            name, callback=run_server, help=server[name],
            context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
            add_help_option=False,
        )  # fmt: skip

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (ApiError, ConnectionFailed) as exc:
            fail(exc, ctx.meta.get(OUTPUT_KEY, "table"))
        except (ConfigError, ValueError) as exc:
            raise click.UsageError(str(exc)) from None
        finally:
            made = ctx.find_object(Session)
            if made is not None and made.made is not None:
                made.made.close()


EPILOG = """\b
Examples:
  tickwheel jobs create --cron '30 9 * * MON-FRI' --tz Europe/Paris --url https://example.com/hook
  tickwheel jobs list --state ACTIVE -o json
  tickwheel jobs pause 6d1f0b1e-7a2c-4bb1-9b55-0c6f3c3f0a10
  tickwheel dlq redrive --job 6d1f0b1e-7a2c-4bb1-9b55-0c6f3c3f0a10 --dry-run

\b
Configuration: TICKWHEEL_API_URL and TICKWHEEL_API_KEY, or a [profile] in ~/.config/tickwheel/config.toml
(api_url, api_key, timeout_s) chosen with --profile or TICKWHEEL_PROFILE.
Exit codes: 0 done, 1 the API answered an error or could not be reached, 2 bad usage or configuration.
"""


@click.group(cls=Front, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--profile", envvar="TICKWHEEL_PROFILE", help="a profile of ~/.config/tickwheel/config.toml")
@click.option("--api-url", help="the API's base URL (default: TICKWHEEL_API_URL, then the profile's)")
@click.version_option(package_name="tickwheel-client", prog_name="tickwheel")
@click.pass_context
def cli(ctx: click.Context, profile: str | None, api_url: str | None) -> None:
    """tickwheel: schedule HTTP calls and Kafka messages, once, on cron or at an interval."""
    ctx.obj = Session(profile, api_url)


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script.

    \b
    Examples:
      eval "$(tickwheel completion bash)"            # in ~/.bashrc
      tickwheel completion fish > ~/.config/fish/completions/tickwheel.fish
    """
    completer = get_completion_class(shell)
    assert completer is not None  # the choice above lists only shells click supports
    click.echo(completer(cli, {}, "tickwheel", "_TICKWHEEL_COMPLETE").source())


cli.add_command(jobs)
cli.add_command(runs)
cli.add_command(dlq)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the exit code as described in this module's docstring."""
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="tickwheel", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code
    except click.Abort:
        click.echo("aborted", err=True)
        return 130
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_API_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
