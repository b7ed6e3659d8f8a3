"""What Client and AsyncClient share: configuration into httpx settings, and the one retry decision per try."""

from __future__ import annotations

from typing import Any, TypeVar

import httpx

from . import models as m
from .config import Config
from .retry import Retries, pause_s, retry_after_s, wants_retry
from .version import VERSION

USER_AGENT = f"tickwheel-client/{VERSION}"
R = TypeVar("R", m.JobSpec, m.JobPatch)


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


def model_of(kind: type[R], given: R | None, fields: dict[str, Any]) -> R:
    """The model the caller gave, or one made of the keyword fields they gave instead (not both)."""
    if given is None:
        return kind(**fields)
    if fields:
        raise TypeError(f"give a {kind.__name__} or its fields, not both")
    return given
