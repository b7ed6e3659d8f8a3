"""List cursors: the store's paging state, sealed to the tenant and the query it was made for.

A cursor the API did not issue (or issued for another query or tenant) is a 422 rather than a paging state
the database would reject, because a forged paging state is bad input, never a server error.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

from tickwheel.errors import InvalidInput
from tickwheel.store.tenants import Tenant

TAG_BYTES = 12


def _tag(tenant: Tenant, scope: str, state: bytes) -> bytes:
    secret = (tenant.signing_secrets[-1] if tenant.signing_secrets else tenant.tenant_id).encode()
    key = hashlib.sha256(b"cursor:" + secret).digest()
    return hmac.new(key, scope.encode() + b"\0" + state, hashlib.sha256).digest()[:TAG_BYTES]


def seal(tenant: Tenant, scope: str, store_cursor: str | None) -> str | None:
    if store_cursor is None:
        return None
    state = store_cursor.encode()
    return base64.urlsafe_b64encode(_tag(tenant, scope, state) + state).decode().rstrip("=")


def unseal(tenant: Tenant, scope: str, cursor: str | None) -> str | None:
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    tag, state = raw[:TAG_BYTES], raw[TAG_BYTES:]
    if not state or not hmac.compare_digest(tag, _tag(tenant, scope, state)):
        raise InvalidInput("cursor is not one this API returned for this list", field="cursor")
    return state.decode()
