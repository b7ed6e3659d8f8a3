"""`tickwheel up` gives the API the sha256 of a local operator key it keeps in .stack/, and names the console."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tickwheel.dev.platform import console_url, ensure_operator_key, process_environment
from tickwheel.settings import Settings


def test_the_operator_key_is_made_once_and_only_its_hash_reaches_the_settings(tmp_path: Path) -> None:
    key_file = ensure_operator_key(tmp_path)
    key = key_file.read_text().strip()
    digest = hashlib.sha256(key.encode()).hexdigest()
    assert key_file.stat().st_mode & 0o077 == 0
    assert ensure_operator_key(tmp_path).read_text().strip() == key  # kept, not replaced
    environ = process_environment(tmp_path, {})
    assert environ["TICKWHEEL_API_OPERATOR_KEY_SHA256"] == digest
    assert Settings.from_env(environ).api.operator_key_sha256 == digest
    assert key not in environ.values()


def test_the_console_url_is_on_the_api_port() -> None:
    assert console_url(Settings()) == "http://127.0.0.1:8080/console/"
