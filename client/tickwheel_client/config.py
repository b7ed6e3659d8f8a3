"""Where the API is and which key to send: TICKWHEEL_API_URL / TICKWHEEL_API_KEY, or a profile in
~/.config/tickwheel/config.toml (`[default]`, `[staging]`, ...; pick one with TICKWHEEL_PROFILE or --profile).

The environment wins over the file, field by field, so a profile can hold the URL and the key come from a
secret store. The key never appears in a repr or a message.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path

from .errors import ConfigError

URL_VARIABLE = "TICKWHEEL_API_URL"
KEY_VARIABLE = "TICKWHEEL_API_KEY"
PROFILE_VARIABLE = "TICKWHEEL_PROFILE"
DEFAULT_PROFILE = "default"
DEFAULT_TIMEOUT_S = 30.0
PROFILE_FIELDS = frozenset({"api_url", "api_key", "timeout_s"})


def default_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """$XDG_CONFIG_HOME/tickwheel/config.toml, else ~/.config/tickwheel/config.toml."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tickwheel" / "config.toml"


@dataclasses.dataclass(frozen=True, slots=True)
class Config:
    """The API's base URL, the tenant's key and the per-request timeout."""

    api_url: str
    api_key: str = dataclasses.field(repr=False)
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        if not self.api_url.startswith(("http://", "https://")):
            raise ConfigError(f"the API URL must start with http:// or https://, not {self.api_url!r}")
        if not self.api_key:
            raise ConfigError(f"no API key: set {KEY_VARIABLE} or api_key in a profile")

    @classmethod
    def load(
        cls,
        profile: str | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        path: Path | None = None,
        api_url: str | None = None,
        api_key: str | None = None,
    ) -> Config:
        """The profile's values under the environment's; explicit `api_url` / `api_key` win over both."""
        environ = os.environ if environ is None else environ
        chosen = profile or environ.get(PROFILE_VARIABLE)
        values = _profile(path or default_config_path(environ), chosen or DEFAULT_PROFILE, required=bool(chosen))
        url = api_url or environ.get(URL_VARIABLE) or values.get("api_url")
        key = api_key or environ.get(KEY_VARIABLE) or values.get("api_key")
        if not url:
            raise ConfigError(f"no API URL: set {URL_VARIABLE}, or api_url in a profile of {default_config_path()}")
        timeout = values.get("timeout_s", DEFAULT_TIMEOUT_S)
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ConfigError("timeout_s must be a positive number of seconds")
        return cls(str(url).rstrip("/"), str(key or ""), float(timeout))


def _profile(path: Path, name: str, *, required: bool) -> dict[str, object]:
    if not path.is_file():
        if required:
            raise ConfigError(f"no profile {name!r}: {path} does not exist")
        return {}
    try:
        document = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path} is not readable TOML: {exc}") from None
    values = document.get(name)
    if values is None:
        if required:
            raise ConfigError(f"no profile [{name}] in {path}; it has {', '.join(sorted(document)) or 'none'}")
        return {}
    if not isinstance(values, dict):
        raise ConfigError(f"[{name}] in {path} must be a table")
    unknown = sorted(set(values) - PROFILE_FIELDS)
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]} in [{name}] of {path}; known: {', '.join(sorted(PROFILE_FIELDS))}")
    return values
