"""The layering rules that a reader should not have to trust: every CQL statement lives in `tickwheel/store`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("api", "dispatcher", "worker", "coordinator", "schemas", "tickwheel", "client/tickwheel_client")
CQL = re.compile(
    r"^\s*(SELECT\s.+\sFROM\s|INSERT\s+INTO\s|UPDATE\s+\w+\s+(USING\s.+\s)?SET\s|DELETE\s.*FROM\s|BEGIN\s+(UNLOGGED\s+)?BATCH"
    r"|(CREATE|DROP|ALTER)\s+(TABLE|KEYSPACE|INDEX|TYPE)\s|TRUNCATE\s)",
    re.IGNORECASE | re.DOTALL,
)


def cql_outside_the_store() -> list[str]:
    """`path:line` of every string literal that reads as a CQL statement, outside tickwheel/store."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith("tickwheel/store/"):
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=relative)):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and CQL.match(node.value):
                    found.append(f"{relative}:{node.lineno}")
    return found


def test_no_cql_outside_the_store() -> None:
    assert cql_outside_the_store() == []


def test_the_check_finds_a_statement_where_it_does_not_belong() -> None:
    for text in ("SELECT * FROM jobs", "insert into runs (a) values (1)", "UPDATE runs SET x = 1", "DELETE FROM t"):
        assert CQL.match(text), text
    for text in ("select a lane", "Update the job", "deleted from the listing", "SELECTED"):
        assert not CQL.match(text), text
