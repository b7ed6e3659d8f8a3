"""`tickwheel tenants set` options are checked before anything is written, naming the option at fault."""

from __future__ import annotations

import pytest

from api.commands import add_commands, tenant_change
from tickwheel.errors import InvalidInput
from tickwheel.settings import Settings


def parse(*argv: str) -> object:
    import argparse

    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers())
    return parser.parse_args(["tenants", "set", "acme", *argv])


def test_the_options_become_one_change() -> None:
    args = parse("--retention-days", "90", "--weight", "5", "--max-jobs", "10", "--notify-events", "dead,recovered")
    change = tenant_change(args, Settings())  # type: ignore[arg-type]
    assert (change.retention_days, change.weight, change.max_jobs) == (90, 5, 10)
    assert change.notify_events == frozenset({"dead", "recovered"}) and change.notify_url is None and not change.clear


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (("--retention-days", "0"), "--retention-days"),
        (("--retention-days", "100000"), "--retention-days"),
        (("--weight", "0"), "--weight"),
        (("--weight", "1001"), "--weight"),
        (("--max-jobs", "0"), "--max-jobs"),
        (("--notify-url", "ftp://x.example"), "--notify-url"),
        (("--notify-events", "dead,exploded"), "--notify-events"),
        (("--weight", "3", "--clear", "weight"), "--clear"),
    ],
)
def test_a_bad_option_is_refused_naming_it(argv: tuple[str, ...], field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        tenant_change(parse(*argv), Settings())  # type: ignore[arg-type]
    assert refused.value.field == field
