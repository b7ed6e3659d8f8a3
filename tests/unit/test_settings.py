"""Where settings come from: the environment, and `.stack/env` only when the local platform names it."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tickwheel.dev.platform import local_settings, process_environment
from tickwheel.errors import SettingsError
from tickwheel.settings import Settings, build

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def local_checkout(tmp_path: Path) -> Path:
    """A working directory whose .stack/env (as `tickwheel stack up` writes it) moves the API port."""
    (tmp_path / ".stack").mkdir()
    (tmp_path / ".stack" / "env").write_text("TICKWHEEL_API_PORT=18080\nTICKWHEEL_CASSANDRA=10.9.9.9:9042\n")
    return tmp_path


def test_settings_read_alone_ignore_a_stack_env_in_the_working_directory(
    local_checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(local_checkout)
    settings = Settings.from_env({})
    assert settings.api.port == 8080
    assert settings.cassandra.hosts == Settings().cassandra.hosts


def test_an_env_file_is_read_when_it_is_named(local_checkout: Path) -> None:
    env_file = local_checkout / ".stack" / "env"
    assert Settings.from_env({}, env_file=env_file).api.port == 18080
    assert Settings.from_env({"TICKWHEEL_ENV_FILE": str(env_file)}).api.port == 18080
    assert Settings.from_env({"TICKWHEEL_ENV_FILE": str(env_file), "TICKWHEEL_API_PORT": "1"}).api.port == 1


def test_a_process_started_alone_ignores_the_stack_env_of_its_working_directory(local_checkout: Path) -> None:
    # `tickwheel api|dispatcher|worker|coordinator` read their settings with load_settings, in a fresh process.
    (local_checkout / ".stack" / "env").write_text("TICKWHEEL_API_PORT=18080\nTICKWHEEL_NOT_A_SETTING=1\n")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TICKWHEEL_")}
    probe = subprocess.run(
        [sys.executable, "-c", "from tickwheel.cli import load_settings; print(load_settings().api.port)"],
        cwd=local_checkout, env={**environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "8080"


def test_the_processes_tickwheel_up_starts_are_told_where_the_stack_env_is(
    local_checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack_dir = local_checkout / ".stack"
    before = dict(os.environ)
    environ = process_environment(stack_dir, {"TICKWHEEL_WORKER_LANES": "urgent"})
    assert os.environ == before  # nothing of the local platform leaks into this process
    assert environ["TICKWHEEL_ENV_FILE"] == str((stack_dir / "env").resolve())
    settings = Settings.from_env(environ)
    assert (settings.api.port, settings.worker.lanes) == (18080, ("urgent",))
    assert settings.worker.egress_allow == ("127.0.0.1/32",)  # the demo's sink is on loopback
    assert len(settings.api.operator_key_sha256) == 64
    monkeypatch.chdir(local_checkout)
    assert local_settings({}).api.port == 18080


def test_the_environment_wins_over_the_local_platforms_defaults(local_checkout: Path) -> None:
    environ = process_environment(local_checkout / ".stack", {"TICKWHEEL_WORKER_EGRESS_ALLOW": "10.0.0.0/8"})
    assert Settings.from_env(environ).worker.egress_allow == ("10.0.0.0/8",)


def a_tree_far_from_the_defaults() -> Settings:
    s = Settings()
    return dataclasses.replace(
        s,
        cassandra=dataclasses.replace(s.cassandra, hosts=("10.0.0.1:9042", "10.0.0.2"), request_timeout_s=2.5),
        kafka=dataclasses.replace(s.kafka, topic_prefix="t1.", lane_partitions=4),
        zookeeper=dataclasses.replace(s.zookeeper, chroot="/tw-test/x", session_timeout_s=4.0),
        redis=dataclasses.replace(s.redis, url="redis://10.0.0.3:6379/2"),
        api=dataclasses.replace(s.api, port=0, cursor_secrets=("new", "old"), auth_cache_s=0.0),
        worker=dataclasses.replace(s.worker, lanes=("urgent",), egress_allow=()),
        shards=64,
        log_level="DEBUG",
    )


def test_settings_written_to_the_environment_read_back_the_same() -> None:
    settings = a_tree_far_from_the_defaults()
    variables = settings.to_env()
    assert Settings.from_env(variables) == settings
    assert build(variables) == settings
    assert variables["TICKWHEEL_CASSANDRA"] == "10.0.0.1:9042,10.0.0.2"  # the endpoint keys, not _HOSTS
    assert variables["TICKWHEEL_API_CURSOR_SECRETS"] == "new,old"


def test_only_what_differs_from_the_defaults_is_written() -> None:
    assert Settings().to_env() == {}
    assert dataclasses.replace(Settings(), shards=8).to_env() == {"TICKWHEEL_SHARDS": "8"}


def test_a_list_item_that_would_not_read_back_is_refused() -> None:
    s = Settings()
    with pytest.raises(SettingsError, match="TICKWHEEL_WORKER_EGRESS_ALLOW"):
        dataclasses.replace(s, worker=dataclasses.replace(s.worker, egress_allow=("10.0.0.0/8,x",))).to_env()


def test_a_child_process_gets_the_settings_and_none_of_the_parents_tickwheel_variables() -> None:
    settings = a_tree_far_from_the_defaults()
    parent = {"PATH": "/bin", "TICKWHEEL_ENV_FILE": "/somewhere/env", "TICKWHEEL_API_PORT": "1"}
    child = settings.process_env(parent)
    assert child["PATH"] == "/bin" and "TICKWHEEL_ENV_FILE" not in child
    assert Settings.from_env(child) == settings
