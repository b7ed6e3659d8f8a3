"""What both locustfiles share: the tenants the runner created, and where a run's outputs go.

`loadtest/run.py` writes the tenants (label -> API key) to `$TW_LOAD_DIR/tenants.json` before Locust starts;
each simulated user takes one tenant, so the load is spread per tenant and stays within each tenant's quota.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # Locust puts only the locustfile's folder on the path
    sys.path.insert(0, str(REPO_ROOT))

LOAD_DIR = Path(os.environ.get("TW_LOAD_DIR", REPO_ROOT / "loadtest" / "results" / "adhoc"))
_tenant_cycle: itertools.cycle[tuple[str, str]] | None = None
DEFAULT_MIX = "create=3,get=5,list=2,patch=1"
OPERATIONS = ("create", "get", "list", "patch")


def tenants() -> dict[str, str]:
    """label -> API key, as written by the runner."""
    return dict(json.loads((LOAD_DIR / "tenants.json").read_text()))


def next_tenant() -> tuple[str, str]:
    """The next (label, key) in turn: users of one process spread evenly over the tenants."""
    global _tenant_cycle
    if _tenant_cycle is None:
        _tenant_cycle = itertools.cycle(sorted(tenants().items()))
    return next(_tenant_cycle)


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def parse_mix(text: str) -> dict[str, int]:
    """`create=3,get=5` -> {'create': 3, 'get': 5}; unknown names are an error, not ignored."""
    mix = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, weight = part.partition("=")
        if name not in OPERATIONS:
            raise ValueError(f"TW_LOAD_MIX: unknown operation {name!r}")
        mix[name] = int(weight or 1)
    return mix
