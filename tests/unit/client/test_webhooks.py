"""tickwheel_client.webhooks.verify against the Standard Webhooks reference: its published vector, the
reference `standardwebhooks` package both ways, and the signatures the worker makes (tickwheel.signing)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import standardwebhooks

from tickwheel.signing import generate_secret, sign_headers
from tickwheel_client.webhooks import Delivery, InvalidSignature, sign, verify

# The vector the Standard Webhooks libraries test against.
VECTOR_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
VECTOR_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
VECTOR_TIMESTAMP = 1614265330
VECTOR_BODY = b'{"test": 2432232314}'
VECTOR_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def vector_headers(signature: str = VECTOR_SIGNATURE) -> dict[str, str]:
    return {"webhook-id": VECTOR_ID, "webhook-timestamp": str(VECTOR_TIMESTAMP), "webhook-signature": signature}


def test_the_published_vector_verifies_and_signs_the_same() -> None:
    assert verify(vector_headers(), VECTOR_BODY, VECTOR_SECRET, now_s=VECTOR_TIMESTAMP) == Delivery(
        VECTOR_ID, VECTOR_TIMESTAMP
    )
    assert sign(VECTOR_SECRET, VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY) == VECTOR_SIGNATURE
    reference = standardwebhooks.Webhook(VECTOR_SECRET)
    stamp = datetime.fromtimestamp(VECTOR_TIMESTAMP, UTC)
    assert reference.sign(VECTOR_ID, stamp, VECTOR_BODY.decode()) == VECTOR_SIGNATURE


def test_the_reference_package_and_this_one_accept_each_others_signatures() -> None:
    secret = generate_secret()
    now = datetime.now(UTC).replace(microsecond=0)
    body = '{"report": "daily", "é": 1}'
    theirs = standardwebhooks.Webhook(secret).sign("msg_1", now, body)
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(int(now.timestamp())), "webhook-signature": theirs}
    assert verify(headers, body.encode(), [secret]).msg_id == "msg_1"
    ours = sign(secret, "msg_1", int(now.timestamp()), body.encode())
    assert standardwebhooks.Webhook(secret).verify(body, {**headers, "webhook-signature": ours}) == {
        "report": "daily",
        "é": 1,
    }


def test_the_workers_signatures_verify_with_either_secret_during_a_rotation() -> None:
    old, new = generate_secret(), generate_secret()
    now = 1_800_000_000
    body = b'{"hello": "world"}'
    headers = sign_headers([new, old], "0b6c4a52-3a53-4d0e-9f43-5f6a2d5d7c11", now, body)
    assert verify(headers, body, [old], now_s=now + 10).msg_id == "0b6c4a52-3a53-4d0e-9f43-5f6a2d5d7c11"
    assert verify(headers, body, [new], now_s=now).timestamp == now
    assert verify({k.upper(): v for k, v in headers.items()}, body, [generate_secret(), old], now_s=now)
    with pytest.raises(InvalidSignature, match="no signature"):
        verify(headers, body, [generate_secret()], now_s=now)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"body": b'{"test": 2432232315}'}, "no signature"),
        ({"now_s": VECTOR_TIMESTAMP + 301}, "from now"),
        ({"now_s": VECTOR_TIMESTAMP - 301}, "from now"),
        ({"signature": "v2," + VECTOR_SIGNATURE[3:]}, "no signature"),
        ({"signature": "v1,not-base64!"}, "no signature"),
        ({"signature": ""}, "missing"),
        ({"timestamp": "yesterday"}, "unix seconds"),
    ],
)
def test_a_tampered_stale_or_malformed_call_is_refused(change: dict[str, object], reason: str) -> None:
    headers = vector_headers(str(change.get("signature", VECTOR_SIGNATURE)))
    if "timestamp" in change:
        headers["webhook-timestamp"] = str(change["timestamp"])
    body = change.get("body", VECTOR_BODY)
    now = change.get("now_s", VECTOR_TIMESTAMP)
    with pytest.raises(InvalidSignature, match=reason):
        verify(headers, body, VECTOR_SECRET, now_s=now)  # type: ignore[arg-type]


def test_a_wider_tolerance_and_unprefixed_secrets_are_accepted() -> None:
    bare = VECTOR_SECRET.removeprefix("whsec_")
    assert verify(vector_headers(), VECTOR_BODY, bare, now_s=VECTOR_TIMESTAMP + 600, tolerance_s=900)
    with pytest.raises(ValueError):
        verify(vector_headers(), VECTOR_BODY, [], now_s=VECTOR_TIMESTAMP)


def test_the_receiver_in_docs_client_md_accepts_a_signed_call_and_refuses_a_forged_one() -> None:
    import http.client
    import re
    import threading
    import time
    from http.server import HTTPServer
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs" / "client.md").read_text()
    code = re.search(r"```python\n(from http\.server.*?)```", text, re.S)
    assert code is not None
    serve_line = 'HTTPServer(("", 8000), Receiver).serve_forever()'
    assert serve_line in code.group(1) and len(code.group(1).strip().splitlines()) <= 16
    namespace: dict[str, object] = {}
    exec(compile(code.group(1).replace(serve_line, ""), "docs/client.md", "exec"), namespace)
    secret = generate_secret()
    namespace["SECRETS"][:] = [secret]  # type: ignore[index]
    server = HTTPServer(("127.0.0.1", 0), namespace["Receiver"])  # type: ignore[arg-type]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        body = b'{"report": "daily"}'
        for secrets_used, expected in (([secret], 204), ([generate_secret()], 401)):
            headers = sign_headers(secrets_used, "run-1", int(time.time()), body)
            connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
            connection.request("POST", "/", body=body, headers=headers)
            assert connection.getresponse().status == expected
            connection.close()
    finally:
        server.shutdown()
        server.server_close()
