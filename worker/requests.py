"""The headers of a call: the job's own, then the platform's (which a job cannot override)."""

from __future__ import annotations

import random

import msgspec

from tickwheel.core.instants import format_instant
from tickwheel.core.templating import render, variables_of
from tickwheel.core.zones import load_zone
from tickwheel.signing import sign_headers
from worker.context import RunContext
from worker.outcome import CONTENT_TYPES, body_of


def traceparent(run_trace_id: str) -> str:
    """W3C trace context: one trace per run (its id), one span per attempt. The span id needs to be unique, not
    unguessable: `secrets` read the kernel's random source (a system call) per call, ~1.5 % of a busy worker's
    event-loop thread; never all zeros (an invalid span id)."""
    return f"00-{run_trace_id}-{random.getrandbits(64) or 1:016x}-01"


def call_headers(ctx: RunContext, attempt: int, body: bytes, timestamp_s: int) -> dict[str, str]:
    """Idempotency-Key and webhook-id are the run id on every attempt, so the receiver can dedupe."""
    target = ctx.definition.target
    own = dict(getattr(target, "headers", {}) or {})
    run_id = str(ctx.run.run_id)
    platform = {
        "Content-Type": CONTENT_TYPES[ctx.definition.payload_encoding],
        "Idempotency-Key": run_id,
        "X-Tickwheel-Attempt": str(attempt),
        "X-Tickwheel-Job-Id": str(ctx.run.job_id),
        "X-Tickwheel-Run-Id": run_id,
        "X-Tickwheel-Scheduled-At": format_instant(ctx.run.scheduled_at),
        "traceparent": traceparent(ctx.run.run_id.hex),
        **sign_headers(ctx.tenant.signing_secrets, run_id, timestamp_s, body),
    }
    lowered = {name.lower() for name in platform}
    return {**{k: v for k, v in own.items() if k.lower() not in lowered}, **platform}


def call_body(ctx: RunContext, attempt: int) -> bytes:
    """The payload as sent: a templated job's string values rendered for this attempt (the occurrence's instant,
    not the fire time); any other payload exactly as stored."""
    definition = ctx.definition
    if not definition.payload_template or not definition.payload:
        return body_of(definition)
    variables = variables_of(
        run_id=str(ctx.run.run_id),
        job_id=str(ctx.run.job_id),
        job_name=definition.name,
        attempt=attempt,
        scheduled_at=ctx.run.scheduled_at,
        tz=load_zone(definition.schedule.tz),
    )
    return msgspec.json.encode(render(msgspec.json.decode(definition.payload), variables))
