"""Standard Webhooks signatures, checked by an independent implementation written here by hand."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from tickwheel.signing import SignatureInvalid, generate_secret, sign_headers, verify


def independent_check(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """The receiver's check as the Standard Webhooks spec describes it, without tickwheel code."""
    key = base64.b64decode(secret.split("_", 1)[1])
    content = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.{body.decode()}".encode()
    expected = base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()
    offered = [part.split(",", 1) for part in headers["webhook-signature"].split(" ")]
    return any(version == "v1" and hmac.compare_digest(sig, expected) for version, sig in offered)


def test_a_signature_verifies_with_an_independent_implementation() -> None:
    secret = generate_secret()
    body = b'{"hello": "world"}'
    headers = sign_headers([secret], "run-1", 1_700_000_000, body)
    assert secret.startswith("whsec_")
    assert headers["webhook-id"] == "run-1"
    assert headers["webhook-timestamp"] == "1700000000"
    assert independent_check(secret, headers, body)
    assert not independent_check(secret, headers, body + b" ")


def test_during_rotation_both_secrets_sign_and_either_verifies() -> None:
    new, old = generate_secret(), generate_secret()
    body = b"payload"
    headers = sign_headers([new, old], "run-2", 1_700_000_000, body)
    assert len(headers["webhook-signature"].split(" ")) == 2
    assert independent_check(new, headers, body)
    assert independent_check(old, headers, body)
    assert not independent_check(generate_secret(), headers, body)
    verify(old, headers, body, now_s=1_700_000_010)


def test_verify_refuses_a_stale_timestamp_a_wrong_secret_and_missing_headers() -> None:
    secret = generate_secret()
    headers = sign_headers([secret], "run-3", 1_700_000_000, b"x")
    with pytest.raises(SignatureInvalid):
        verify(secret, headers, b"x", now_s=1_700_000_000 + 301)
    with pytest.raises(SignatureInvalid):
        verify(generate_secret(), headers, b"x", now_s=1_700_000_000)
    with pytest.raises(SignatureInvalid):
        verify(secret, {"webhook-id": "run-3"}, b"x", now_s=1_700_000_000)
