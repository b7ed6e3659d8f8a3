"""Standard Webhooks signatures (https://www.standardwebhooks.com).

Every call carries `webhook-id` (the run id: the same on every attempt, so receivers can dedupe),
`webhook-timestamp` (unix seconds) and `webhook-signature`: `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`
for each of the tenant's secrets, space-separated. A tenant keeps its secrets newest first
(`tenants.signing_secrets`); during a rotation both are used, so receivers holding either secret verify.
Secrets are stored as `whsec_<base64 of the key bytes>`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets as random_secrets
from collections.abc import Mapping, Sequence

from tickwheel.errors import TickwheelError

SECRET_PREFIX = "whsec_"
DEFAULT_TOLERANCE_S = 300


class SignatureInvalid(TickwheelError):
    status = 401
    title = "Invalid webhook signature"


def generate_secret(key_bytes: int = 32) -> str:
    """A new signing secret in the stored format."""
    return SECRET_PREFIX + base64.b64encode(random_secrets.token_bytes(key_bytes)).decode()


def secret_key(secret: str) -> bytes:
    """The key bytes of a `whsec_<base64>` secret."""
    text = secret.removeprefix(SECRET_PREFIX)
    try:
        return base64.b64decode(text, validate=True)
    except ValueError as exc:
        raise SignatureInvalid("signing secret is not whsec_<base64>") from exc


def signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """One `v1,<base64>` signature of `id.timestamp.body`."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def sign_headers(secrets: Sequence[str], msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers; one signature per secret (newest first), space-separated."""
    headers = {"webhook-id": msg_id, "webhook-timestamp": str(timestamp)}
    if secrets:
        headers["webhook-signature"] = " ".join(signature(s, msg_id, timestamp, body) for s in secrets)
    return headers


def verify(
    secret: str, headers: Mapping[str, str], body: bytes, now_s: float, tolerance_s: int = DEFAULT_TOLERANCE_S
) -> None:
    """Raise SignatureInvalid unless one of the signatures in `headers` is `secret`'s and the timestamp is fresh."""
    lowered = {k.lower(): v for k, v in headers.items()}
    msg_id = lowered.get("webhook-id")
    stamp = lowered.get("webhook-timestamp")
    offered = lowered.get("webhook-signature")
    if not (msg_id and stamp and offered):
        raise SignatureInvalid("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        timestamp = int(stamp)
    except ValueError as exc:
        raise SignatureInvalid("webhook-timestamp is not an integer") from exc
    if abs(now_s - timestamp) > tolerance_s:
        raise SignatureInvalid("webhook-timestamp is outside the tolerance")
    expected = signature(secret, msg_id, timestamp, body).encode()
    if not any(hmac.compare_digest(expected, candidate.encode()) for candidate in offered.split()):
        raise SignatureInvalid("no signature matches")
