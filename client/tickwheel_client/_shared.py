"""What Client and AsyncClient share: configuration into httpx settings, and the one retry decision per try."""

from __future__ import annotations

from typing import Any

import httpx

from . import models as m
from .config import Config
from .retry import Retries, pause_s, retry_after_s, wants_retry

USER_AGENT = "tickwheel-client/1.0"


def resolve(config: Config | None, api_url: str | None, api_key: str | None, profile: str | None) -> Config:
    """An explicit Config, or explicit url and key, or the environment and profile (explicit values win)."""
    if config is not None:
        return config
    if api_url and api_key:
        return Config(api_url.rstrip("/"), api_key)
    return Config.load(profile, api_url=api_url, api_key=api_key)


def http_options(config: Config) -> dict[str, Any]:
    return {
        "base_url": config.api_url,
        "headers": {"Authorization": f"Bearer {config.api_key}", "User-Agent": USER_AGENT},
        "timeout": config.timeout_s,
    }


def answer_pause_s(response: httpx.Response, retries: Retries, attempt: int) -> float | None:
    """Seconds to wait before trying again after this answer, or None to take it as final."""
    after = retry_after_s(response.headers.get("Retry-After"))
    if not wants_retry(response.status_code, after):
        return None
    return pause_s(retries, attempt, after)


def spec_of(spec: m.JobSpec | None, fields: dict[str, Any]) -> m.JobSpec:
    if spec is not None:
        if fields:
            raise TypeError("give a JobSpec or its fields, not both")
        return spec
    return m.JobSpec(**fields)


def patch_of(patch: m.JobPatch | None, fields: dict[str, Any]) -> m.JobPatch:
    if patch is not None:
        if fields:
            raise TypeError("give a JobPatch or its fields, not both")
        return patch
    return m.JobPatch(**fields)
