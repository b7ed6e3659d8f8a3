"""Fault test: a `tickwheel worker` process killed with SIGKILL in the middle of a call. Its run is called again
after its lease, with the same webhook-id, by another worker. Runs a subprocess; takes about 20 s."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from benchmarks.private_platform import free_port
from schemas.messages import HttpTarget
from tests.integration.worker.conftest import Scene
from tickwheel.settings import WorkerSettings


def worker_process(scene: Scene, port: int, log_path: Path) -> subprocess.Popen[bytes]:
    """A `tickwheel worker` on the scene's keyspace, topics and Redis namespace with a 1 s lease; its other worker
    settings stay at their defaults (the scene's in-process workers shorten the deferral, commit and grace)."""
    s, defaults = scene.settings, WorkerSettings()
    worker = dataclasses.replace(
        s.worker,
        port=port,
        lease_s=1,
        lease_margin_s=1.0,
        defer_s=defaults.defer_s,
        commit_interval_s=defaults.commit_interval_s,
        shutdown_grace_s=defaults.shutdown_grace_s,
    )
    env = dataclasses.replace(
        s, redis=dataclasses.replace(s.redis, key_prefix=f"{scene.tenant}:"), worker=worker
    ).process_env()
    with log_path.open("wb") as log:
        return subprocess.Popen([sys.executable, "-m", "tickwheel.cli", "worker"], env=env, stdout=log, stderr=log)


async def wait_ready(port: int, process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        assert process.poll() is None, "the worker process exited"
        try:
            await asyncio.to_thread(urllib.request.urlopen, f"http://127.0.0.1:{port}/readyz", None, 1)
            return
        except OSError:
            await asyncio.sleep(0.2)
    raise TimeoutError("the worker process never became ready")


async def test_a_worker_killed_mid_call_is_called_again_after_its_lease_with_the_same_webhook_id(
    scene: Scene, tmp_path: Path
) -> None:
    port = free_port()
    process = worker_process(scene, port, tmp_path / "worker.log")
    try:
        await wait_ready(port, process)
        run = await scene.job(HttpTarget(url=scene.sink.url("/killed", delay_seq="4000,0"), timeout_s=3))
        [first] = await scene.sink.wait_arrived("/killed", 1)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
        claimed = await scene.run_row(run.run_id)
        assert (claimed.status, claimed.attempt) == ("RUNNING", 1)
        assert claimed.lease_until is not None
        lease_until = claimed.lease_until.timestamp()
        await scene.worker()
        row = await scene.wait_status(run.run_id, "SUCCEEDED", timeout_s=40)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait(10)
    second = (await scene.sink.wait_arrived("/killed", 2))[1]
    assert first.header("webhook-id") == second.header("webhook-id") == str(run.run_id)
    assert (first.header("X-Tickwheel-Attempt"), second.header("X-Tickwheel-Attempt")) == ("1", "2")
    assert second.received_at >= lease_until
    assert row.attempt == 2
