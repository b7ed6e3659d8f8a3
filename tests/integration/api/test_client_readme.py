"""The README's client examples run as written: five lines of Python and three commands create, list and
pause a job on the real API."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from tests.integration.api.conftest import Caller
from tickwheel_client import AsyncClient, JobState

README = Path(__file__).resolve().parents[3] / "README.md"


def block(language: str, after: str) -> str:
    """The first fenced block of `language` after the line containing `after`."""
    text = README.read_text()
    found = re.search(rf"```{language}\n(.*?)```", text[text.index(after) :], re.S)
    assert found is not None, f"no {language} block after {after!r} in README.md"
    return found.group(1)


@pytest.fixture
def environment(alice: Caller, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    values = {"TICKWHEEL_API_URL": str(alice.client.make_url("")).rstrip("/"), "TICKWHEEL_API_KEY": alice.key}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


async def listed(environment: dict[str, str]) -> list[tuple[str | None, JobState]]:
    async with AsyncClient() as tw:
        return [(job.name, job.state) async for job in tw.list_jobs()]


async def test_the_five_lines_of_python(environment: dict[str, str]) -> None:
    code = block("python", "five lines of Python")
    assert len(code.strip().splitlines()) == 5
    printed = io.StringIO()

    def run() -> None:
        with contextlib.redirect_stdout(printed):
            exec(compile(code, "README.md", "exec"), {})

    await asyncio.to_thread(run)
    assert "ACTIVE" in printed.getvalue()  # listed before the pause
    assert await listed(environment) == [(None, JobState.PAUSED)]


async def test_the_three_commands(environment: dict[str, str], tmp_path: Path) -> None:
    commands = [shlex.split(line) for line in block("bash", "and in three commands").strip().splitlines()]
    assert len(commands) == 3 and all(c[0] == "tickwheel" for c in commands)
    script = str(Path(sys.executable).parent / "tickwheel")
    env = {**os.environ, **environment, "HOME": str(tmp_path)}
    job_id = ""
    for command in commands:
        args = [job_id if a == "JOB_ID" else a for a in command[1:]]
        process = await asyncio.create_subprocess_exec(script, *args, env=env, stdout=asyncio.subprocess.PIPE)
        out, _ = await process.communicate()
        assert process.returncode == 0, (command, out)
        if not job_id:
            job_id = json.loads(out)["id"]
    assert await listed(environment) == [(None, JobState.PAUSED)]
