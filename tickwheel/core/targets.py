"""What a tenant's target may carry: header names and values, Kafka topics. Pure; shared by the API (which
refuses a job with a 422) and the worker (which refuses a stored job written before a rule existed).

Headers a tenant may not set are those that change how the request is framed or routed (hop-by-hop and framing
headers: a `Transfer-Encoding` beside aiohttp's `Content-Length` lets one tenant's request swallow the next
request on a pooled connection) and the platform's own (signatures, idempotency, attempt), which a receiver
must be able to trust.
"""

from __future__ import annotations

import re

HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$")
# Visible ASCII, space and horizontal tab (RFC 9110 field-value without obs-text): anything else either
# breaks the request line framing (CR, LF, NUL) or is refused by the HTTP client at call time (VT, DEL, ...).
HEADER_VALUE = re.compile(r"^[\t\x20-\x7e]*$")
MAX_HEADER_VALUE = 8192

CONNECTION_HEADERS = frozenset(
    {
        # hop-by-hop (RFC 9110 7.6.1) and framing
        "connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", "content-length", "host",
        "expect", "proxy-connection",
    }
)  # fmt: skip
PLATFORM_HEADERS = frozenset({"idempotency-key", "traceparent", "tracestate"})
PLATFORM_HEADER_PREFIXES = ("webhook-", "x-tickwheel-")


PLATFORM_TOPIC_PREFIX = "tickwheel."


def header_refusal(name: str, value: str, *, platform_too: bool = True) -> str | None:
    """Why a tenant may not send header `name: value`, or None when it may. `platform_too=False` leaves out
    the platform's own names, which the worker overrides anyway (for jobs stored before the API refused them)."""
    if not HEADER_NAME.match(name):
        return f"header name {name!r} is not a valid HTTP token"
    lowered = name.lower()
    if lowered in CONNECTION_HEADERS or lowered.startswith("proxy-"):
        return f"header {name!r} controls the connection or the request framing; it may not be set by a job"
    if platform_too and (lowered in PLATFORM_HEADERS or lowered.startswith(PLATFORM_HEADER_PREFIXES)):
        return f"header {name!r} is set by the platform; it may not be set by a job"
    if len(value) > MAX_HEADER_VALUE:
        return f"header {name!r} is longer than {MAX_HEADER_VALUE} characters"
    if not HEADER_VALUE.match(value):
        return f"header {name!r} contains control or non-ASCII characters (CR, LF, NUL, VT, DEL, ...)"
    return None


def topic_prefix_refusal(prefix: str) -> str | None:
    """Why a tenant's Kafka topic prefix is unusable, or None. It must end with `.` (so `acme` cannot reach
    `acme2.events`) and must not be the platform's own (`tickwheel.`, where the run lanes live)."""
    if not prefix.endswith(".") or len(prefix) < 2:
        return f"the tenant's Kafka topic prefix {prefix!r} must end with '.'"
    if prefix.lower().startswith(PLATFORM_TOPIC_PREFIX):
        return f"the tenant's Kafka topic prefix {prefix!r} is inside the platform's own {PLATFORM_TOPIC_PREFIX!r}"
    return None


def topic_refusal(topic: str, prefix: str, platform_topics: str = PLATFORM_TOPIC_PREFIX) -> str | None:
    """Why a tenant with Kafka topic prefix `prefix` may not produce to `topic`, or None when it may;
    `platform_topics` is where the platform's own topics start (the deployment's topic prefix + `tickwheel.`)."""
    bad_prefix = topic_prefix_refusal(prefix)
    if bad_prefix is not None:
        return bad_prefix
    if topic.lower().startswith(platform_topics.lower()):
        return f"topic {topic} is one of the platform's own"
    if not topic.startswith(prefix) or len(topic) == len(prefix):
        return f"topic {topic} is outside the tenant's prefix {prefix!r}"
    return None


def default_topic_prefix(tenant_id: str) -> str:
    """The Kafka topic prefix of a tenant that has none configured."""
    return f"{tenant_id}."
