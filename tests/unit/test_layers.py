"""The layering rules that a reader should not have to trust: every CQL statement lives in `tickwheel/store`, and
no production process loads the development package `tickwheel/dev`."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("api", "dispatcher", "worker", "coordinator", "schemas", "tickwheel", "client/tickwheel_client")
CQL = re.compile(
    r"^\s*(SELECT\s.+\sFROM\s|INSERT\s+INTO\s|UPDATE\s+\w+\s+(USING\s.+\s)?SET\s|DELETE\s.*FROM\s|BEGIN\s+(UNLOGGED\s+)?BATCH"
    r"|(CREATE|DROP|ALTER)\s+(TABLE|KEYSPACE|INDEX|TYPE)\s|TRUNCATE\s)",
    re.IGNORECASE | re.DOTALL,
)


def modules(packages: tuple[str, ...], outside: str | None = None) -> Iterator[tuple[str, ast.Module]]:
    """(path from the repository root, syntax tree) of every module of `packages`, except those under `outside`."""
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if outside is None or not relative.startswith(outside):
                yield relative, ast.parse(path.read_text(), filename=relative)


def cql_outside_the_store() -> list[str]:
    """`path:line` of every string literal that reads as a CQL statement, outside tickwheel/store."""
    found = []
    for relative, tree in modules(PACKAGES, outside="tickwheel/store/"):
        for node in ast.walk(tree):
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


# Development-only code (the local stack, `tickwheel up`, the demo, the sink, the checker) lives in tickwheel/dev.
PRODUCTION_PACKAGES = ("api", "dispatcher", "worker", "coordinator", "schemas", "tickwheel")
PRODUCTION_ENTRY_MODULES = ("api.main", "dispatcher.main", "worker.main", "coordinator.main", "tickwheel.cli")
DEV_PACKAGE = "tickwheel.dev"


def _is_dev(module: str) -> bool:
    return module == DEV_PACKAGE or module.startswith(DEV_PACKAGE + ".")


def dev_imports_in_production() -> list[str]:
    """`path:line` of every import statement of tickwheel.dev outside it, lazy ones inside functions included."""
    found = []
    for relative, tree in modules(PRODUCTION_PACKAGES, outside="tickwheel/dev/"):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            if any(_is_dev(name) for name in names):
                found.append(f"{relative}:{node.lineno}")
    return found


def test_no_production_module_imports_the_development_package() -> None:
    assert dev_imports_in_production() == []


# Imports each entry module in turn, then builds the CLI's parser as `tickwheel api|dispatcher|...` does, and prints
# after each step the tickwheel.dev modules loaded so far.
_PROBE = """
import importlib, json, sys
loaded = {}
def note(step):
    loaded[step] = sorted(m for m in sys.modules if m == "tickwheel.dev" or m.startswith("tickwheel.dev."))
for name in sys.argv[1:]:
    importlib.import_module(name)
    note(name)
from tickwheel import cli
cli.build_parser().parse_args(["api"])
note("tickwheel api")
print(json.dumps(loaded))
"""


def test_a_production_process_never_loads_the_development_package() -> None:
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE, *PRODUCTION_ENTRY_MODULES], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert probe.returncode == 0, probe.stderr
    loaded = json.loads(probe.stdout)
    assert list(loaded) == [*PRODUCTION_ENTRY_MODULES, "tickwheel api"]
    assert {step: modules for step, modules in loaded.items() if modules} == {}


def test_the_development_commands_are_listed_alike_whether_or_not_their_module_is_loaded() -> None:
    from tickwheel import cli

    assert cli.server_commands() == cli.server_commands(dev=True)
    assert set(cli.DEV_COMMANDS) <= set(cli.server_commands(dev=True))


def test_the_probe_sees_the_development_package_when_it_is_imported() -> None:
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE, "tickwheel.dev.sink"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout)["tickwheel.dev.sink"] == ["tickwheel.dev", "tickwheel.dev.sink"]


# The adapters' public names (modules, classes, functions, methods) each say in one line what they are for.
DOCUMENTED_PACKAGES = ("tickwheel/bus", "tickwheel/coordination", "tickwheel/flow")


def undocumented_public_names() -> list[str]:
    """`path:line name` of every public module, class, function or method without a docstring."""
    found = []
    for relative, tree in modules(DOCUMENTED_PACKAGES):
        if not ast.get_docstring(tree):
            found.append(f"{relative}:1 (module)")
        found += _undocumented(tree.body, relative, "")
    return found


def _undocumented(nodes: list[ast.stmt], relative: str, owner: str) -> list[str]:
    found = []
    for node in nodes:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) or node.name.startswith("_"):
            continue
        if not ast.get_docstring(node):
            found.append(f"{relative}:{node.lineno} {owner}{node.name}")
        if isinstance(node, ast.ClassDef):
            found += _undocumented(node.body, relative, f"{node.name}.")
    return found


def test_every_public_name_of_the_bus_coordination_and_flow_adapters_has_a_docstring() -> None:
    assert undocumented_public_names() == []


# The processes use the adapters' methods, never the raw client inside one (`x.redis.redis`, `x.zk.client`).
RAW_CLIENTS = {("redis", "redis"), ("zk", "client")}


def raw_clients_reached_through() -> list[str]:
    """`path:line` of every `<...>.redis.redis` or `<...>.zk.client` in the production packages."""
    found = []
    for relative, tree in modules(PRODUCTION_PACKAGES):
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                owner = node.value
                name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", None)
                if (name, node.attr) in RAW_CLIENTS:
                    found.append(f"{relative}:{node.lineno}")
    return found


def test_no_process_reaches_through_an_adapter_to_its_raw_client() -> None:
    assert raw_clients_reached_through() == []


# The API depends on its store port (`tickwheel.store.ports.ApiStore`), not on the Cassandra driver: only the
# modules that build the store (the API process, the `tenants` operator commands) import the implementation.
STORE_IMPLEMENTATIONS = ("tickwheel.store.cassandra", "tickwheel.store.tables")
API_COMPOSITION = ("api/main.py", "api/commands.py")


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module:
        return [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return []


def store_bypasses(trees: list[tuple[str, ast.Module]]) -> list[str]:
    """`path:line` of every import of a store implementation, and of every call handing a `.store` to a function
    (`jobs.get_job(api.store, ...)`: a table module called with the driver instead of the port's method)."""
    found = []
    for relative, tree in trees:
        if relative in API_COMPOSITION:
            continue
        for node in ast.walk(tree):
            names = _imported(node)
            if not isinstance(node, ast.stmt | ast.expr):
                continue
            if any(name == impl or name.startswith(impl + ".") for name in names for impl in STORE_IMPLEMENTATIONS):
                found.append(f"{relative}:{node.lineno}")
            if isinstance(node, ast.Call) and any(
                isinstance(arg, ast.Attribute) and arg.attr == "store" for arg in node.args
            ):
                found.append(f"{relative}:{node.lineno}")
    return found


def test_the_api_reaches_the_store_only_through_its_port() -> None:
    assert store_bypasses(list(modules(("api",)))) == []


def test_the_store_check_finds_the_driver_and_a_table_module_called_with_it() -> None:
    old = (
        "from tickwheel.store.cassandra import CassandraStore\n"
        "async def f(api):\n    return await jobs.get_job(api.store, 1)\n"
        "async def g(api):\n    return await api.store.get_job(1)\n"
    )
    assert store_bypasses([("api/context.py", ast.parse(old))]) == ["api/context.py:1", "api/context.py:3"]
    assert store_bypasses([("api/main.py", ast.parse(old))]) == []
