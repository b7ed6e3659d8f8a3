"""The local stack: status, reuse, environment overrides, and the start/stop helpers fault tests use."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tickwheel.dev import stack
from tickwheel.dev.stack import cassandra, process
from tickwheel.settings import Settings, host_port

ROOT = Path(__file__).resolve().parents[2]
STACK_DIR = ROOT / ".stack"


def _pids() -> dict[str, int | None]:
    return {name: process.read_pid(STACK_DIR, name) for name in stack.SPECS}


def test_status_reports_every_server_healthy(stack_settings: Settings) -> None:
    rows = stack.status(STACK_DIR)
    assert [row.name for row in rows] == ["cassandra", "kafka", "zookeeper", "redis"]
    assert all(row.healthy for row in rows), rows


def test_the_env_file_names_every_endpoint(stack_settings: Settings) -> None:
    lines = (STACK_DIR / "env").read_text().splitlines()
    # plus the LWT tables' grace when the stack's node purges Paxos state by it (one started by this checkout)
    told = set(cassandra.client_settings(STACK_DIR, ["cassandra"]))
    assert {line.split("=", 1)[0] for line in lines} == {spec.env_var for spec in stack.SPECS.values()} | told


def test_a_second_up_reuses_the_running_servers(stack_settings: Settings) -> None:
    before = _pids()
    stack.up(STACK_DIR, progress=lambda line: None)
    assert _pids() == before


def test_an_endpoint_in_the_environment_wins_and_is_not_started(
    stack_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    external = stack.endpoints()["redis"]
    monkeypatch.setenv("TICKWHEEL_REDIS", external)
    assert stack.up(tmp_path, only={"redis"}, progress=lambda line: None) == {"redis": external}
    assert process.read_pid(tmp_path, "redis") is None
    assert (tmp_path / "env").read_text() == f"TICKWHEEL_REDIS={external}\n"


def test_wait_ready_gives_up_after_its_timeout() -> None:
    with pytest.raises(stack.StackError, match="not ready"):
        stack.wait_ready("redis", "redis://127.0.0.1:1/0", timeout_s=0.3)


def test_a_pid_file_of_a_recycled_pid_is_ignored(tmp_path: Path) -> None:
    path = process.pid_path(tmp_path, "redis")
    path.parent.mkdir(parents=True)
    path.write_text(f"{os.getpid()} 1\n")  # our pid, but not our start time
    assert process.read_pid(tmp_path, "redis") is None


def test_endpoint_overrides_read_only_the_four_server_variables() -> None:
    env = {"TICKWHEEL_KAFKA": "k:1", "TICKWHEEL_REDIS": "", "TICKWHEEL_OTHER": "x"}
    assert stack.endpoint_overrides(env) == {"kafka": "k:1"}


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [("127.0.0.1:19042", ("127.0.0.1", 19042)), ("redis://h:16379/0", ("h", 16379)), ("h", ("h", 7))],
)
def test_host_port_accepts_pairs_and_urls(endpoint: str, expected: tuple[str, int]) -> None:
    assert host_port(endpoint, 7) == expected


@pytest.mark.restarts_servers
def test_a_stopped_server_answers_again_after_start_server(stack_settings: Settings) -> None:
    if "redis" in stack.endpoint_overrides():
        pytest.fail("Redis is external (TICKWHEEL_REDIS): this test restarts the stack's own Redis")
    endpoint = stack.endpoints()["redis"]
    assert stack.stop_server(STACK_DIR, "redis")
    with pytest.raises(stack.StackError):
        stack.wait_ready("redis", endpoint, timeout_s=0.2)
    stack.start_server(STACK_DIR, "redis")
    assert stack.wait_ready("redis", endpoint, timeout_s=5).startswith("Redis ")
