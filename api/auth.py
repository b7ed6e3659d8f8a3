"""Bearer API keys -> tenant, then the tenant's request rate; both before any handler runs."""

from __future__ import annotations

import time

from aiohttp import web
from aiohttp.typedefs import Handler

from tickwheel.errors import Unauthorized
from tickwheel.store import tenants
from tickwheel.store.tenants import Tenant

from .context import KEY_ID, TENANT, Api, api_of
from .quotas import check_rate

PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/v1/openapi.json"})
# The console's static files hold no data; operator routes check the operator key themselves (api.operator).
NO_TENANT_PREFIXES = ("/console", "/v1/operator/")


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path in PUBLIC_PATHS or request.path.startswith(NO_TENANT_PREFIXES):
        return await handler(request)
    api = api_of(request)
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise Unauthorized("send your API key as `Authorization: Bearer <key>`")
    tenant = await tenant_for_key(api, key.strip())
    if tenant is None:
        raise Unauthorized("the API key is unknown or revoked")
    request[TENANT] = tenant
    request[KEY_ID] = tenants.key_id_of(tenants.hash_key(key.strip()))
    await check_rate(api, tenant)
    return await handler(request)


async def tenant_for_key(api: Api, key: str) -> Tenant | None:
    key_hash = tenants.hash_key(key)
    cached = api.key_cache.get(key_hash)
    if cached is not None and cached[1] > time.monotonic():
        return cached[0]
    tenant_id = await tenants.authenticate(api.store, key)
    tenant = None if tenant_id is None else await tenants.get_tenant(api.store, tenant_id)
    if tenant is not None and api.settings.api.auth_cache_s > 0:
        if len(api.key_cache) > 10_000:
            api.key_cache.clear()
        api.key_cache[key_hash] = (tenant, time.monotonic() + api.settings.api.auth_cache_s)
    return tenant
