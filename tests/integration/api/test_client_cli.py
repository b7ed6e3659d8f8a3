"""The `tickwheel` CLI against the real API: every command in its own subprocess, `-o json` parsed and
asserted, exit codes 0 / 1 (the API's problem on stderr) / 2 (usage), and both front doors (the client's
script and the server's) running the same commands."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.integration.api.conftest import Caller, existing_run
from tickwheel.store import runs
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.dead_letters import add_dead_letter

SCRIPT = Path(sys.executable).parent / "tickwheel"
CLIENT_DOOR = (sys.executable, "-m", "tickwheel_client.cli.main")
SERVER_DOOR = (sys.executable, "-m", "tickwheel.cli")


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.code == 0, (self.code, self.err)
        return json.loads(self.out)


Run = Callable[..., Awaitable[Result]]


@pytest.fixture
def tickwheel(alice: Caller, tmp_path: Path) -> Run:
    """tickwheel(*args, door=..., stdin=..., env=...) -> Result, with alice's URL and key in the environment."""
    base_env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),  # no profile of the person running the tests
        "TICKWHEEL_API_URL": str(alice.client.make_url("")).rstrip("/"),
        "TICKWHEEL_API_KEY": alice.key,
        "TICKWHEEL_ENV_FILE": str(tmp_path / "no-env"),
    }

    async def run(
        *args: str, door: tuple[str, ...] = (str(SCRIPT),), stdin: str = "", env: dict[str, str] | None = None
    ) -> Result:
        process = await asyncio.create_subprocess_exec(
            *door, *args, cwd=tmp_path, env={**base_env, **(env or {})},
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await process.communicate(stdin.encode())
        return Result(process.returncode or 0, out.decode(), err.decode())

    return run


async def test_a_job_created_listed_edited_paused_resumed_previewed_and_deleted(tickwheel: Run, tmp_path: Path) -> None:
    (tmp_path / "payload.json").write_text('{"report": "daily"}')
    created = (await tickwheel(
        "jobs", "create", "--cron", "30 9 * * MON-FRI", "--tz", "Europe/Paris", "--url", "https://example.com/report",
        "--header", "X-Team=ops", "--payload", "@payload.json", "--label", "team=ops", "--name", "report", "-o", "json",
    )).json()  # fmt: skip
    job_id = created["id"]
    assert created["schedule"] == {"type": "cron", "expr": "30 9 * * MON-FRI", "tz": "Europe/Paris"}
    assert created["target"] == {"type": "http", "url": "https://example.com/report", "headers": {"X-Team": "ops"}}
    assert (created["payload"], created["labels"], created["state"]) == ({"report": "daily"}, {"team": "ops"}, "ACTIVE")
    listed = (await tickwheel("jobs", "list", "--label", "team=ops", "-o", "json")).json()
    assert [job["id"] for job in listed] == [job_id]
    got = (await tickwheel("jobs", "get", job_id, "-o", "json")).json()
    assert got["version"] == 1 and got["name"] == "report" and got["fired_count"] == 0 and got["last_run"] is None
    edited = (await tickwheel("jobs", "edit", job_id, "--every", "2h", "--name", "report v2", "-o", "json")).json()
    assert (edited["version"], edited["name"], edited["schedule"]["everyS"]) == (2, "report v2", 7200)
    (tmp_path / "patch.yaml").write_text("priority: urgent\nlabels: {team: billing}\n")
    patched = (await tickwheel("jobs", "edit", job_id, "-f", "patch.yaml", "-o", "json")).json()
    assert (patched["version"], patched["priority"], patched["labels"]) == (3, "urgent", {"team": "billing"})
    paused = (await tickwheel("jobs", "pause", job_id, "-o", "json")).json()
    assert (paused["state"], paused["next_run_at"]) == ("PAUSED", None)
    assert [j["id"] for j in (await tickwheel("jobs", "list", "--state", "PAUSED", "-o", "json")).json()] == [job_id]
    resumed = await tickwheel("jobs", "resume", job_id, "-o", "yaml")
    assert resumed.code == 0 and "state: ACTIVE" in resumed.out
    fires = (await tickwheel("jobs", "preview", job_id, "-n", "4", "-o", "json")).json()
    assert len(fires) == 4 and all(datetime.fromisoformat(f["at"]).tzinfo is not None for f in fires)
    table = await tickwheel("jobs", "list")
    assert table.code == 0 and job_id in table.out and "report v2" in table.out
    assert (await tickwheel("jobs", "delete", job_id, "-o", "json")).json() == {"id": job_id, "deleted": True}
    assert (await tickwheel("jobs", "list", "-o", "json")).json() == []


async def test_jobs_from_a_file_of_many_are_created_once_even_when_the_command_is_run_again(
    tickwheel: Run, alice: Caller, tmp_path: Path
) -> None:
    topic = f"{alice.tenant_id}.reminders"  # a Kafka topic must be under the tenant's prefix (422 otherwise)
    target = {"type": "kafka", "topic": topic}
    jobs = [
        {"name": f"job {n}", "schedule": {"type": "interval", "everyS": 3600 + n}, "target": {**target, "key": f"k{n}"}}
        for n in range(5)
    ]
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    first = (await tickwheel("jobs", "create", "-f", "jobs.json", "--idempotency-key", "import-1", "-o", "json")).json()
    again = (await tickwheel("jobs", "create", "-f", "jobs.json", "--idempotency-key", "import-1", "-o", "json")).json()
    assert [j["id"] for j in first] == [j["id"] for j in again] and len({j["id"] for j in first}) == 5
    assert sorted(j["name"] for j in (await tickwheel("jobs", "list", "-o", "json")).json()) == [
        f"job {n}" for n in range(5)
    ]
    one = (await tickwheel("jobs", "create", "-f", "-", "-o", "json", stdin=json.dumps(jobs[0]))).json()
    assert one["target"] == {"type": "kafka", "topic": topic, "key": "k0"}


async def test_runs_and_dead_letters_listed_shown_and_redriven(
    tickwheel: Run, alice: Caller, store: CassandraStore
) -> None:
    job = (await tickwheel("jobs", "create", "--every", "1h", "--url", "https://example.com/x", "-o", "json")).json()
    now = datetime.now(UTC)
    run_id = uuid.UUID(job["next_run_id"])
    run = await existing_run(store, run_id)
    assert (await runs.claim(store, run, 0, "w1", now + timedelta(seconds=60), now)).applied
    assert await runs.finish(store, run, 1, runs.AttemptResult(runs.RunStatus.DEAD, error="HTTP 500"), "w1", now, now)
    await add_dead_letter(
        store, tenant_id=alice.tenant_id, run_id=run_id, job_id=run.job_id, target_host="example.com",
        payload=b"{}", last_error="HTTP 500", attempts=[{"attempt": 1, "code": 500}], dead_at=now, ttl_s=86400,
    )  # fmt: skip
    history = (await tickwheel("runs", "list", job["id"], "-o", "json")).json()
    assert [(r["id"], r["status"]) for r in history] == [(str(run_id), "DEAD")]
    shown = (await tickwheel("runs", "get", str(run_id), "-o", "json")).json()
    assert (shown["status"], shown["job_id"]) == ("DEAD", job["id"])
    table = await tickwheel("runs", "get", str(run_id))
    assert table.code == 0 and "attempts" in table.out
    letters = (await tickwheel("dlq", "list", "--since", "1h", "-o", "json")).json()
    assert [(d["run_id"], d["target_host"]) for d in letters] == [(str(run_id), "example.com")]
    dry = (await tickwheel("dlq", "redrive", "--job", job["id"], "--dry-run", "-o", "json")).json()
    assert dry == {"dry_run": True, "matched": 1, "run_ids": [str(run_id)]}
    done = (await tickwheel("dlq", "redrive", "--job", job["id"], "-o", "json")).json()
    assert (done["redriven"], done["run_ids"], done["skipped"]) == (1, [str(run_id)], [])
    again = await tickwheel("dlq", "redrive", str(run_id), "-o", "json")
    assert again.code == 1 and json.loads(again.out)["skipped"][0]["status"] == 404


async def test_exit_codes_problems_on_stderr_and_no_secret_printed(tickwheel: Run, alice: Caller) -> None:
    missing = await tickwheel("jobs", "get", str(uuid.uuid4()), "-o", "json")
    assert missing.code == 1 and json.loads(missing.err)["status"] == 404 and missing.out == ""
    bad = await tickwheel("jobs", "create", "--cron", "61 * * * *", "--url", "https://example.com")
    assert bad.code == 1 and "schedule.expr" in bad.err
    usage = await tickwheel("jobs", "create", "--cron", "* * * * *")
    assert usage.code == 2 and "target" in usage.err
    assert (await tickwheel("jobs", "get", "not-an-id")).code == 2
    assert (await tickwheel("jobs", "frobnicate")).code == 2
    unconfigured = await tickwheel("jobs", "list", env={"TICKWHEEL_API_KEY": ""})
    assert unconfigured.code == 2 and "TICKWHEEL_API_KEY" in unconfigured.err
    wrong_key = await tickwheel("jobs", "list", env={"TICKWHEEL_API_KEY": "tw_wrong"})
    assert wrong_key.code == 1 and "401" in wrong_key.err
    for result in (missing, bad, usage, unconfigured, wrong_key):
        assert alice.key not in result.out + result.err
    helped = await tickwheel("jobs", "create", "--help")
    assert helped.code == 0 and "Examples:" in helped.out and "--kafka-topic" in helped.out


async def test_both_front_doors_run_tenant_and_server_commands(tickwheel: Run) -> None:
    for door in (CLIENT_DOOR, SERVER_DOOR):
        assert (await tickwheel("jobs", "list", "-o", "json", door=door)).json() == []
        assert (await tickwheel("--help", door=door)).out.count("tenants") >= 1
    served = await tickwheel("tenants", "--help", door=CLIENT_DOOR)
    assert served.code == 0 and "create" in served.out


async def test_shell_completion_script_and_completions(tickwheel: Run) -> None:
    script = await tickwheel("completion", "bash")
    assert script.code == 0 and "_TICKWHEEL_COMPLETE" in script.out
    env = {"_TICKWHEEL_COMPLETE": "bash_complete", "COMP_WORDS": "tickwheel jobs pa", "COMP_CWORD": "2"}
    for door in (CLIENT_DOOR, SERVER_DOOR):
        offered = await tickwheel(door=door, env=env)
        assert "pause" in offered.out, offered
    job = (await tickwheel("jobs", "create", "--every", "1h", "--url", "https://example.com/x", "-o", "json")).json()
    ids = {
        "_TICKWHEEL_COMPLETE": "bash_complete",
        "COMP_WORDS": f"tickwheel jobs pause {job['id'][:4]}",
        "COMP_CWORD": "3",
    }
    offered = await tickwheel(env=ids)
    assert offered.out.split() == ["plain," + job["id"]], offered


async def test_edit_without_flags_opens_the_editor_on_the_definition_and_sends_what_changed(
    tickwheel: Run, tmp_path: Path
) -> None:
    job = (await tickwheel("jobs", "create", "--every", "1h", "--url", "https://example.com/x", "--name", "before",
                           "-o", "json")).json()  # fmt: skip
    editor = tmp_path / "editor.py"
    editor.write_text(
        "import pathlib, sys\np = pathlib.Path(sys.argv[1])\np.write_text(p.read_text().replace('before', 'after'))\n"
    )
    edited = (
        await tickwheel("jobs", "edit", job["id"], "-o", "json", env={"EDITOR": f"{sys.executable} {editor}"})
    ).json()
    assert (edited["name"], edited["version"], edited["schedule"]) == ("after", 2, job["schedule"])
    unchanged = await tickwheel("jobs", "edit", job["id"], env={"EDITOR": "true"})
    assert unchanged.code == 0 and "no change" in unchanged.err
    assert (await tickwheel("jobs", "get", job["id"], "-o", "json")).json()["version"] == 2


async def test_the_cli_applies_triggers_skips_pauses_and_backfills(tickwheel: Run, tmp_path: Path) -> None:
    definition = tmp_path / "report.yaml"
    definition.write_text(
        "schedule: {type: cron, expr: '0 * * * *'}\ntarget: {type: http, url: 'https://example.com/hook'}\n"
    )
    made = (await tickwheel("jobs", "apply", "hourly-report", "-f", str(definition), "-o", "json")).json()
    again = (await tickwheel("jobs", "apply", "hourly-report", "-f", str(definition), "-o", "json")).json()
    assert (again["id"], again["version"]) == (made["id"], 1)
    run = (await tickwheel("jobs", "trigger", made["id"], "-o", "json")).json()
    assert run["origin"] == "trigger"
    skipped = (await tickwheel("jobs", "skip", made["id"], "-n", "1", "-o", "json")).json()
    assert len(skipped["schedule"]["skip"]) == 1
    until = (datetime.now(UTC) + timedelta(hours=2)).isoformat()
    paused = (await tickwheel("jobs", "pause-until", made["id"], until, "-o", "json")).json()
    assert paused["schedule"]["pausedUntil"] is not None
    planned = (await tickwheel("jobs", "backfill", made["id"], "--from", "3h", "--to", "1h", "--dry-run",
                               "-o", "json")).json()  # fmt: skip
    assert planned["dry_run"] is True and planned["count"] == 2
    usage = await tickwheel("jobs", "skip", made["id"])
    assert usage.code == 2
