"""List cursors: the store's paging state, sealed to the tenant and the query it was made for.

A cursor the API did not issue (or issued for another query or tenant) is a 422 rather than a paging state
the database would reject, because a forged paging state is bad input, never a server error.

The seal is an HMAC keyed by a platform secret (`api.cursor_secrets`, newest first), never by anything a
tenant or a webhook receiver holds. Rotation: put the new secret first and keep the old one second while
cursors issued under it may still be in use (minutes); new cursors are sealed with the first, any listed
secret opens one. Without configured secrets each process draws a random one at start (cursors then open only
on the process that issued them), and says so in its log.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass

from tickwheel.errors import InvalidInput

log = logging.getLogger(__name__)

TAG_BYTES = 12


@dataclass(frozen=True, slots=True)
class CursorSealer:
    """Seals and opens cursors with the platform's cursor secrets (newest first)."""

    keys: tuple[bytes, ...]

    @classmethod
    def from_secrets(cls, configured: tuple[str, ...]) -> CursorSealer:
        chosen = tuple(s for s in configured if s)
        if not chosen:
            log.warning("api.cursor_secrets is empty: cursors open only on this process until it restarts")
            chosen = (secrets.token_urlsafe(32),)
        return cls(tuple(hashlib.sha256(b"tickwheel-cursor:" + s.encode()).digest() for s in chosen))

    def seal(self, tenant_id: str, scope: str, store_cursor: str | None) -> str | None:
        if store_cursor is None:
            return None
        state = store_cursor.encode()
        return base64.urlsafe_b64encode(_tag(self.keys[0], tenant_id, scope, state) + state).decode().rstrip("=")

    def unseal(self, tenant_id: str, scope: str, cursor: str | None) -> str | None:
        if not cursor:
            return None
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        except (binascii.Error, ValueError):
            raw = b""
        tag, state = raw[:TAG_BYTES], raw[TAG_BYTES:]
        if not state or not any(hmac.compare_digest(tag, _tag(k, tenant_id, scope, state)) for k in self.keys):
            raise InvalidInput("cursor is not one this API returned for this list", field="cursor")
        try:
            return state.decode()
        except UnicodeDecodeError:  # only a cursor we sealed gets here, and we seal text
            raise InvalidInput("cursor is not one this API returned for this list", field="cursor") from None


def _tag(key: bytes, tenant_id: str, scope: str, state: bytes) -> bytes:
    message = tenant_id.encode() + b"\0" + scope.encode() + b"\0" + state
    return hmac.new(key, message, hashlib.sha256).digest()[:TAG_BYTES]
