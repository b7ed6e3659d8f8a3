"""How long a tenant's data is kept: the default of its kind, unless the tenant has its own retention."""

from __future__ import annotations

DAY_S = 86_400


def retention_s(default_days: int, tenant_days: int | None) -> int:
    """The TTL in seconds for data that stops being needed now (a tenant's override wins over the default)."""
    return (tenant_days if tenant_days else default_days) * DAY_S
