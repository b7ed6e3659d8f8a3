"""The CLI's flag parsing, without an API: durations, instants, key=value pairs, and the usage errors (exit 2)
that are caught before any request is made."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import click
import pytest

from tickwheel_client.cli import definitions as d
from tickwheel_client.cli.main import main


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("5m", 300), ("1h30m", 5400), ("2d", 172_800)])
def test_durations(text: str, seconds: int) -> None:
    assert d.duration_s(text) == seconds


@pytest.mark.parametrize("text", ["", "5x", "1h30", "m5", "-5m", "1.5h"])
def test_a_malformed_duration_is_a_usage_error(text: str) -> None:
    with pytest.raises(click.BadParameter):
        d.duration_s(text)


def test_instants_are_aware_or_a_duration_ago() -> None:
    now = datetime(2026, 11, 30, 12, tzinfo=UTC)
    assert d.instant("2h", now) == now - timedelta(hours=2)
    assert d.instant("2026-11-30T09:00:00Z") == datetime(2026, 11, 30, 9, tzinfo=UTC)
    with pytest.raises(click.BadParameter, match="no offset"):
        d.instant("2026-11-30T09:00:00")


def test_pairs_and_schedules_and_targets() -> None:
    assert d.pairs(("team=ops", "tier=a=b"), "--label") == {"team": "ops", "tier": "a=b"}
    with pytest.raises(click.BadParameter):
        d.pairs(("team",), "--label")
    assert d.schedule_of(None, None, None, "5m").every_s == 300  # type: ignore[union-attr]
    assert d.target_of(None, None, (), "t", "k").topic == "t"  # type: ignore[union-attr]
    with pytest.raises(click.UsageError):
        d.schedule_of("* * * * *", None, "2026-01-01T00:00:00Z", None)
    with pytest.raises(click.UsageError):
        d.target_of("https://x", None, (), "t", None)


@pytest.mark.parametrize(
    "argv",
    [
        ["jobs", "create", "--cron", "* * * * *"],  # no target
        ["jobs", "create", "--url", "https://x", "--every", "soon"],
        ["jobs", "create", "--url", "https://x", "--cron", "* * * * *", "--at", "2026-01-01T00:00:00Z"],
        ["jobs", "create", "--url", "https://x", "--every", "5m", "--payload", "{not json"],
        ["jobs", "list", "--label", "team"],
        ["jobs", "get", "not-a-uuid"],
        ["jobs", "preview", "6d1f0b1e-7a2c-4bb1-9b55-0c6f3c3f0a10", "-n", "0"],
        ["dlq", "list", "--since", "yesterday"],
        ["jobs", "list", "-o", "xml"],
        ["nothing"],
    ],
)
def test_usage_errors_exit_2_before_any_request(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TICKWHEEL_API_URL", "http://127.0.0.1:9")  # nothing listens: a request would exit 1
    monkeypatch.setenv("TICKWHEEL_API_KEY", "k")
    assert main(argv) == 2


def test_help_and_version_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0 and "Exit codes" in capsys.readouterr().out
    assert main(["--version"]) == 0 and "1.0.0" in capsys.readouterr().out


def test_each_front_door_hands_over_the_others_commands(capsys: pytest.CaptureFixture[str]) -> None:
    from tickwheel import cli as server_cli

    listed = server_cli.server_commands()
    assert {"tenants", "api", "stack"} <= listed.keys() and not {"jobs", "runs", "dlq"} & listed.keys()
    assert server_cli.main(["dlq", "--help"]) == 0 and "redrive" in capsys.readouterr().out
    assert main(["stack", "--help"]) == 0 and "status" in capsys.readouterr().out
