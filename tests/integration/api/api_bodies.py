"""Job bodies the API tests send."""

from __future__ import annotations

from datetime import datetime
from typing import Any


def cron_job(**overrides: Any) -> dict[str, Any]:
    body = {
        "name": "nightly report",
        "schedule": {"type": "cron", "expr": "0 9 * * *", "tz": "Europe/Paris"},
        "target": {"type": "http", "url": "https://example.com/hook", "headers": {"X-Team": "ops"}},
        "payload": {"report": "daily"},
        "labels": {"team": "ops"},
    }
    body.update(overrides)
    return body


def once_job(run_at: datetime, **overrides: Any) -> dict[str, Any]:
    body = {
        "schedule": {"type": "once", "runAt": run_at.isoformat()},
        "target": {"type": "http", "url": "https://example.com/once"},
        "payload": {"n": 1},
    }
    body.update(overrides)
    return body
