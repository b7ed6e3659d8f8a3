"""The headers of a call: the job's own, then the platform's (which a job cannot override)."""

from __future__ import annotations

import secrets

from tickwheel.signing import sign_headers
from worker.context import RunContext
from worker.outcome import CONTENT_TYPES


def traceparent(run_trace_id: str) -> str:
    """W3C trace context: one trace per run (its id), one span per attempt."""
    return f"00-{run_trace_id}-{secrets.token_hex(8)}-01"


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
        "traceparent": traceparent(ctx.run.run_id.hex),
        **sign_headers(ctx.tenant.signing_secrets, run_id, timestamp_s, body),
    }
    lowered = {name.lower() for name in platform}
    return {**{k: v for k, v in own.items() if k.lower() not in lowered}, **platform}
