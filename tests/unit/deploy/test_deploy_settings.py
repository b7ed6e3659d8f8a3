"""Every environment variable the chart can set is a setting the processes know, and values.schema.json
offers exactly the settings of tickwheel/settings.py (helm needs no cluster, but these checks need no helm)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tickwheel.errors import SettingsError
from tickwheel.settings import ENDPOINT_KEYS, _known_keys, build

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
CHART = DEPLOY / "helm" / "tickwheel"
VALUE_FILES = [CHART / "values.yaml", *sorted((DEPLOY / "values").glob("*.yaml"))]
PROCESSES = ("api", "coordinator", "dispatcher", "worker")
# Set by the chart itself, so not offered under `config` in the values.
CHART_SET = {f"TICKWHEEL_{p.upper()}_{f}" for p in PROCESSES for f in ("HOST", "PORT")} | {"TICKWHEEL_WORKER_LANES"}


def env_from_config(config: dict[str, Any]) -> dict[str, str]:
    """The chart's rule (templates/_helpers.tpl, tickwheel.configData): section.field -> TICKWHEEL_SECTION_FIELD."""
    env = {}
    for key, value in config.items():
        pairs = value.items() if isinstance(value, dict) else [("", value)]
        for field, v in pairs:
            name = f"TICKWHEEL_{key}_{field}" if field else f"TICKWHEEL_{key}"
            env[name.upper()] = ",".join(v) if isinstance(v, list) else str(v)
    return env


def values_of(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


def literal_env_names() -> set[str]:
    """TICKWHEEL_* names written literally in the templates and in the value files' env maps."""
    texts = [p.read_text() for p in (CHART / "templates").glob("*")]
    names = set(re.findall(r"\bTICKWHEEL_[A-Z0-9_]*[A-Z0-9]\b", "\n".join(texts)))
    for path in VALUE_FILES:
        values = values_of(path)
        names |= set(values.get("secrets", {}).get("env", {}))
        for component in ("api", "coordinator", "dispatcher", "worker", "workerUrgent"):
            names |= set(values.get(component, {}).get("extraEnv", {}))
    return names


@pytest.mark.parametrize("path", VALUE_FILES, ids=lambda p: p.name)
def test_the_settings_a_values_file_configures_are_known_and_parse(path: Path) -> None:
    env = env_from_config(values_of(path).get("config", {}))

    assert env, "every values file sets some settings"
    assert set(env) <= set(_known_keys())
    build(env)  # raises SettingsError on a value that does not parse


def test_every_env_name_written_in_the_chart_or_its_values_is_a_setting() -> None:
    names = literal_env_names()

    assert {"TICKWHEEL_WORKER_LANES", "TICKWHEEL_REDIS"} <= names
    assert names - set(_known_keys()) == set()


def test_the_host_port_and_endpoint_keys_the_chart_derives_are_settings() -> None:
    derived = CHART_SET | set(ENDPOINT_KEYS)

    assert derived <= set(_known_keys())


def test_the_values_schema_offers_exactly_the_settings_the_chart_does_not_set_itself() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    config = schema["properties"]["config"]["properties"]
    offered = set()
    for key, spec in config.items():
        fields = spec.get("properties", {"": None}) if spec.get("type") == "object" else {"": None}
        offered |= {(f"TICKWHEEL_{key}_{f}" if f else f"TICKWHEEL_{key}").upper() for f in fields}

    assert offered == set(_known_keys()) - CHART_SET - set(ENDPOINT_KEYS)


def test_a_misspelled_setting_is_caught_by_the_same_rule() -> None:
    env = env_from_config({"worker": {"concurency_default": 10}})

    assert not set(env) <= set(_known_keys())
    with pytest.raises(SettingsError):
        build(env)
