"""Schemathesis over schemas/openapi.yaml against a real `tickwheel api` process, with every check: no input it
generates may produce a server error, a status, header, content type or body the document does not describe,
an accepted schema-violating request, a refused schema-valid one (beyond the refusals schemathesis.toml lists
as by design), or a deleted resource that still answers."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest

from benchmarks.private_platform import free_port
from tickwheel.settings import Settings
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.tenants import create_tenant

ROOT = Path(__file__).resolve().parents[3]
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
CONFIG = Path(__file__).with_name("schemathesis.toml")  # which refusals of schema-valid data are by design
EXAMPLES = "100"  # per operation and phase: enough that hypothesis reaches the nested and boundary values
# The request timeout is generous because the box is shared (a DELETE's LWTs took > 20 s at load 15): this
# test is about what the API answers, latency is measured by the benchmarks.


def process_env(settings: Settings, port: int) -> dict[str, str]:
    api = dataclasses.replace(settings.api, port=port, requests_per_s=100_000)
    return dataclasses.replace(settings, api=api).process_env()


@pytest.fixture
async def api_url(settings: Settings) -> AsyncIterator[str]:
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tickwheel.cli", "api", env=process_env(settings, port), cwd=ROOT,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(150):
                try:
                    async with http.get(f"{url}/healthz") as answer:
                        if answer.status == 200:
                            break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.2)
        yield url
    finally:
        process.terminate()
        await process.wait()


@pytest.mark.timeout(900)
async def test_schemathesis_with_every_check_finds_nothing(api_url: str, store: CassandraStore, namespace: str):
    _, key = await create_tenant(store, namespace, datetime.now(UTC), tenant_id=namespace)
    run = await asyncio.create_subprocess_exec(
        str(SCHEMATHESIS), "--config-file", str(CONFIG), "run", str(ROOT / "schemas" / "openapi.yaml"),
        "--url", api_url,
        # every check is on by default; `--checks all` would also override the config file's per-operation
        # exceptions (its `use_after_free` off for a deleted job's runs and history, which stay readable)
        "-H", f"Authorization: Bearer {key}",
        "--phases", "examples,coverage,fuzzing,stateful", "-n", EXAMPLES, "--seed", "7", "--request-timeout", "60",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await asyncio.wait_for(run.communicate(), timeout=840)
    assert run.returncode == 0, output.decode()[-12000:]
