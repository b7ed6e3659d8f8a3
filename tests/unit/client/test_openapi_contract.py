"""The client cannot drift from schemas/openapi.yaml: every operation has a client method on both clients, and
every request and answer model has exactly the document's properties, required-ness, enums, nullability and
instant types. The document is read when the test runs, so a field added to it fails here until the client
has it too."""

from __future__ import annotations

import inspect
import types
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from tickwheel_client import AsyncClient, Client
from tickwheel_client.operations import OPERATIONS, Operation

DOCUMENT_PATH = Path(__file__).resolve().parents[3] / "schemas" / "openapi.yaml"
METHODS = ("get", "put", "post", "patch", "delete")


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(DOCUMENT_PATH.read_text())
    return loaded


def resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        node: Any = document
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        schema = node
    return schema


def merged(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """An allOf flattened into one object schema (properties and required united)."""
    schema = resolve(document, schema)
    if "allOf" not in schema:
        return schema
    properties: dict[str, Any] = {}
    required: list[str] = []
    for part in schema["allOf"]:
        part = merged(document, part)
        properties.update(part.get("properties", {}))
        required += part.get("required", [])
    return {"type": "object", "properties": properties, "required": required}


def without_none(info: Any) -> tuple[Any, bool]:
    """(the type, whether None is allowed)."""
    if isinstance(info, msgspec.inspect.UnionType):
        rest = [t for t in info.types if not isinstance(t, msgspec.inspect.NoneType)]
        nullable = len(rest) < len(info.types)
        return (rest[0] if len(rest) == 1 else msgspec.inspect.UnionType(tuple(rest))), nullable
    return info, False


def compare(document: dict[str, Any], schema: dict[str, Any], info: Any, where: str) -> list[str]:
    """Every difference between a schema and a model type, as readable lines."""
    schema = merged(document, schema)
    info, nullable = without_none(info)
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    problems = []
    if "null" in kinds and not nullable:
        problems.append(f"{where}: the document allows null, the model does not")
    if isinstance(info, msgspec.inspect.AnyType):
        return problems
    if "oneOf" in schema:
        return problems + compare_union(document, schema["oneOf"], info, where)
    values = schema.get("enum", [schema["const"]] if "const" in schema else None)
    if values is not None and schema.get("type") != "object":
        return problems + compare_enum([v for v in values if v is not None], info, where)
    if "object" in kinds and "properties" in schema:
        return problems + compare_struct(document, schema, info, where)
    return problems + compare_scalar(document, schema, kinds, info, where)


def compare_enum(values: list[Any], info: Any, where: str) -> list[str]:
    if not isinstance(info, msgspec.inspect.EnumType):
        return [f"{where}: the document has enum {values}, the model has {type(info).__name__}"]
    missing = set(values) - {member.value for member in info.cls}
    return [f"{where}: {info.cls.__name__} lacks {sorted(missing)}"] if missing else []


def compare_union(document: dict[str, Any], options: list[dict[str, Any]], info: Any, where: str) -> list[str]:
    structs = {t.tag: t for t in getattr(info, "types", [info]) if isinstance(t, msgspec.inspect.StructType)}
    problems = []
    for option in options:
        option = resolve(document, option)
        tag = option["properties"]["type"]["const"]
        if tag not in structs:
            problems.append(f"{where}: no model for the {tag!r} variant")
            continue
        problems += compare_struct(document, option, structs.pop(tag), f"{where}<{tag}>")
    return problems + [f"{where}: the model has a variant {tag!r} the document lacks" for tag in structs]


def compare_struct(document: dict[str, Any], schema: dict[str, Any], info: Any, where: str) -> list[str]:
    if not isinstance(info, msgspec.inspect.StructType):
        return [f"{where}: the document has an object, the model has {type(info).__name__}"]
    fields = {f.encode_name: f for f in info.fields}
    documented = dict(schema["properties"])
    if info.tag_field is not None:
        documented.pop(info.tag_field, None)  # the variant's tag is the model's class, not a field
    problems = [f"{where}.{name}: in the document, not in {info.cls.__name__}" for name in documented.keys() - fields]
    problems += [f"{where}.{name}: in {info.cls.__name__}, not in the document" for name in fields.keys() - documented]
    required = set(schema.get("required", []))
    for name in documented.keys() & fields.keys():
        if fields[name].required != (name in required):
            says = "requires" if name in required else "does not require"
            problems.append(f"{where}.{name}: the document {says} it, the model disagrees")
        problems += compare(document, documented[name], fields[name].type, f"{where}.{name}")
    return problems


SCALARS = {
    "integer": (msgspec.inspect.IntType,),
    "number": (msgspec.inspect.FloatType, msgspec.inspect.IntType),
    "boolean": (msgspec.inspect.BoolType,),
    "string": (msgspec.inspect.StrType,),
}
FORMATS = {"date-time": msgspec.inspect.DateTimeType, "uuid": msgspec.inspect.UUIDType}


def compare_scalar(
    document: dict[str, Any], schema: dict[str, Any], kinds: list[Any], info: Any, where: str
) -> list[str]:
    if "array" in kinds:
        if not isinstance(info, msgspec.inspect.ListType):
            return [f"{where}: the document has an array, the model has {type(info).__name__}"]
        return compare(document, schema.get("items", {}), info.item_type, f"{where}[]")
    if "object" in kinds:
        ok = isinstance(info, msgspec.inspect.DictType)
        return [] if ok else [f"{where}: the document has a map, the model has {type(info).__name__}"]
    expected = FORMATS.get(schema.get("format", ""))
    if expected is not None:
        if not isinstance(info, expected):
            return [
                f"{where}: format {schema['format']} wants {expected.__name__}, the model has {type(info).__name__}"
            ]
        if expected is msgspec.inspect.DateTimeType and info.tz is not True:
            return [f"{where}: an instant must decode as an aware datetime (Instant)"]
        return []
    wanted = [kind for kind in kinds if kind in SCALARS]
    if wanted and not any(isinstance(info, SCALARS[kind]) for kind in wanted):
        return [f"{where}: the document has {wanted}, the model has {type(info).__name__}"]
    return []


def operations_of(document: dict[str, Any]) -> set[tuple[str, str]]:
    """The tenant operations: the operator's (secured by operatorKey, for the console) are no client's business."""
    return {
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in METHODS and {"operatorKey": []} not in operation.get("security", [])
    }


def test_every_operation_of_the_document_has_a_method_on_both_clients(document: dict[str, Any]) -> None:
    assert operations_of(document) == {(op.method, op.path) for op in OPERATIONS}
    for op in OPERATIONS:
        assert callable(getattr(Client, op.client_method, None)), op
        assert callable(getattr(AsyncClient, op.client_method, None)), op


def test_both_clients_have_the_same_methods_with_the_same_parameters() -> None:
    def public(kind: type) -> dict[str, inspect.Signature]:
        return {
            name: inspect.signature(member)
            for name, member in vars(kind).items()
            if not name.startswith("_") and isinstance(member, types.FunctionType)
        }

    sync, aio = public(Client), public(AsyncClient)
    assert sync.keys() - {"close"} == aio.keys() - {"aclose"}
    for name in sync.keys() - {"close"}:
        assert list(sync[name].parameters.values()) == list(aio[name].parameters.values()), name
        assert inspect.iscoroutinefunction(vars(AsyncClient)[name]) != name.startswith("list_"), name


def _body_schema(document: dict[str, Any], op: Operation) -> dict[str, Any] | None:
    operation = document["paths"][op.path][op.method.lower()]
    body = operation.get("requestBody")
    return None if body is None else body["content"]["application/json"]["schema"]


def _answer_schema(document: dict[str, Any], op: Operation) -> dict[str, Any] | None:
    responses = document["paths"][op.path][op.method.lower()]["responses"]
    success = [resolve(document, r) for code, r in responses.items() if code.startswith("2")]
    content = success[0].get("content", {}) if success else {}
    media = content.get("application/json") or content.get("text/plain")
    return None if media is None else media["schema"]


@pytest.mark.parametrize("op", OPERATIONS, ids=lambda op: f"{op.method} {op.path}")
def test_the_request_model_matches_the_documented_body(document: dict[str, Any], op: Operation) -> None:
    schema = _body_schema(document, op)
    assert (schema is None) == (op.request is None), "a documented body needs a model, and only then"
    if schema is not None:
        assert compare(document, schema, msgspec.inspect.type_info(op.request), op.client_method) == []


@pytest.mark.parametrize("op", OPERATIONS, ids=lambda op: f"{op.method} {op.path}")
def test_the_answer_model_matches_the_documented_answer(document: dict[str, Any], op: Operation) -> None:
    schema = _answer_schema(document, op)
    if op.answer is None:  # probes and documents: a free-form object, a text, or no body at all
        assert schema is None or resolve(document, schema).get("type") in ("object", "string")
        assert schema is None or "properties" not in resolve(document, schema)
        return
    assert schema is not None
    assert compare(document, schema, msgspec.inspect.type_info(op.answer), op.client_method) == []


def test_the_problem_model_matches_the_documented_problem(document: dict[str, Any]) -> None:
    from tickwheel_client.models import Problem

    schema = document["components"]["schemas"]["Problem"]
    assert compare(document, schema, msgspec.inspect.type_info(Problem), "Problem") == []


def test_a_field_the_document_gains_is_caught(document: dict[str, Any]) -> None:
    """The comparison itself can fail: a property the model lacks, and a wrong enum, are both reported."""
    from tickwheel_client.models import Job, RunSummary

    schema = merged(document, document["components"]["schemas"]["Job"])
    grown = {**schema, "properties": {**schema["properties"], "owner": {"type": "string"}}}
    assert compare(document, grown, msgspec.inspect.type_info(Job), "Job") == ["Job.owner: in the document, not in Job"]
    summary = resolve(document, document["components"]["schemas"]["RunSummary"])
    statuses = {**summary, "properties": {**summary["properties"], "status": {"type": "string", "enum": ["PARKED"]}}}
    assert compare(document, statuses, msgspec.inspect.type_info(RunSummary), "R") == [
        "R.status: RunStatus lacks ['PARKED']"
    ]


def test_the_client_is_versioned_with_the_api(document: dict[str, Any]) -> None:
    import tomllib

    from tickwheel_client import __version__

    project = tomllib.loads((DOCUMENT_PATH.parents[1] / "client" / "pyproject.toml").read_text())["project"]
    assert project["version"] == __version__
    assert __version__.split(".")[:2] == str(document["info"]["version"]).split(".")[:2]
