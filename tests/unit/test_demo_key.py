"""The demo tenant's API key file is readable by its owner only."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tickwheel.dev.demo import save_key


def test_the_demo_key_is_written_0600_whatever_the_umask_and_over_an_open_file(tmp_path: Path) -> None:
    (tmp_path / "demo-api-key").write_text("old\n")
    os.chmod(tmp_path / "demo-api-key", 0o644)
    previous = os.umask(0)
    try:
        written = save_key(tmp_path, "tw_secret")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert written.read_text() == "tw_secret\n"
