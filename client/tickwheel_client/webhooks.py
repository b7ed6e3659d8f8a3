"""Verify the calls tickwheel makes to you (Standard Webhooks, https://www.standardwebhooks.com).

Each call carries `webhook-id` (the run id: the same on every attempt, so it is your dedupe key),
`webhook-timestamp` (unix seconds) and `webhook-signature`: space-separated `v1,<base64 HMAC-SHA256 of
"id.timestamp.body">`, one per signing secret while a rotation is under way. Pass every secret you accept;
one matching signature is enough. Comparisons are constant-time.

    from tickwheel_client.webhooks import verify, InvalidSignature

    try:
        delivery = verify(request.headers, await request.body(), ["whsec_..."])
    except InvalidSignature:
        return Response(status_code=401)
    if already_done(delivery.msg_id): ...
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import time
from collections.abc import Mapping, Sequence

from .errors import TickwheelClientError

SECRET_PREFIX = "whsec_"
DEFAULT_TOLERANCE_S = 300


class InvalidSignature(TickwheelClientError):
    """The call is not signed by any of the given secrets, or its timestamp is stale (answer 401)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Delivery:
    """A verified call: its id (the run id, for dedupe) and when it was signed."""

    msg_id: str
    timestamp: int


def _key(secret: str) -> bytes:
    text = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a signing secret is whsec_<base64>") from None
    if not key:
        raise ValueError("a signing secret may not be empty")
    return key


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The `v1,<base64>` signature of one call (for tests of your receiver)."""
    digest = hmac.new(_key(secret), f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def verify(
    headers: Mapping[str, str],
    body: bytes | str,
    secrets: str | Sequence[str],
    *,
    tolerance_s: int = DEFAULT_TOLERANCE_S,
    now_s: float | None = None,
) -> Delivery:
    """The delivery, when one signature is made with one of `secrets` and the timestamp is within tolerance."""
    keys = [_key(s) for s in ([secrets] if isinstance(secrets, str) else secrets)]
    if not keys:
        raise ValueError("give at least one signing secret")
    lowered = {name.lower(): value for name, value in headers.items()}
    msg_id, stamp = lowered.get("webhook-id"), lowered.get("webhook-timestamp")
    offered = lowered.get("webhook-signature")
    if not (msg_id and stamp and offered):
        raise InvalidSignature("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        timestamp = int(stamp)
    except ValueError:
        raise InvalidSignature("webhook-timestamp is not unix seconds") from None
    now = time.time() if now_s is None else now_s
    if abs(now - timestamp) > tolerance_s:
        raise InvalidSignature(f"webhook-timestamp is more than {tolerance_s} s from now")
    signed = f"{msg_id}.{timestamp}.".encode() + (body.encode() if isinstance(body, str) else body)
    expected = [hmac.new(key, signed, hashlib.sha256).digest() for key in keys]
    for candidate in offered.split():
        version, _, encoded = candidate.partition(",")
        if version != "v1":
            continue
        try:
            digest = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            continue
        if any(hmac.compare_digest(digest, one) for one in expected):
            return Delivery(msg_id, timestamp)
    raise InvalidSignature("no signature matches any of the given secrets")
