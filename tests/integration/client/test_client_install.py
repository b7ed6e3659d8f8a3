"""`pip install ./client` into a fresh virtualenv gives a working tickwheel_client and `tickwheel` CLI, and none
of the server's dependencies (no Cassandra, Kafka, ZooKeeper or Redis driver, no aiohttp). Needs PyPI (or a
pip cache) for httpx, msgspec, click, rich and PyYAML."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

CLIENT_DIR = Path(__file__).resolve().parents[3] / "client"
SERVER_DISTRIBUTIONS = {
    "scylla-driver",
    "cassandra-driver",
    "kazoo",
    "confluent-kafka",
    "redis",
    "aiohttp",
    "tickwheel",
}
INSTALL_TIMEOUT_S = 240


def run(
    *args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=INSTALL_TIMEOUT_S, check=False)  # fmt: skip


def test_the_client_installs_alone_and_works_without_any_server_dependency(tmp_path: Path) -> None:
    source = tmp_path / "client"
    shutil.copytree(CLIENT_DIR, source, ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    venv = tmp_path / "venv"
    assert run(sys.executable, "-m", "venv", venv).returncode == 0
    python, script = venv / "bin" / "python", venv / "bin" / "tickwheel"
    installed = run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", source)
    assert installed.returncode == 0, installed.stderr[-3000:]
    names = run(python, "-m", "pip", "list", "--format=freeze").stdout.lower()
    distributions = {line.split("==")[0] for line in names.splitlines()}
    assert "tickwheel-client" in distributions and "httpx" in distributions
    assert not distributions & SERVER_DISTRIBUTIONS, distributions & SERVER_DISTRIBUTIONS
    probe = (
        "import sys, tickwheel_client, tickwheel_client.webhooks, tickwheel_client.cli.main; print(sorted(sys.modules))"
    )
    imported = run(python, "-c", probe, cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    assert "'tickwheel'" not in imported.stdout and "cassandra" not in imported.stdout
    env = {"HOME": str(tmp_path), "PATH": str(venv / "bin")}
    helped = run(script, "--help", cwd=tmp_path, env=env)
    assert helped.returncode == 0 and "jobs" in helped.stdout and "tenants" not in helped.stdout
    unconfigured = run(script, "jobs", "list", cwd=tmp_path, env=env)
    assert unconfigured.returncode == 2 and "TICKWHEEL_API_URL" in unconfigured.stderr
    server_only = run(script, "tenants", "list", cwd=tmp_path, env=env)
    assert server_only.returncode == 2
