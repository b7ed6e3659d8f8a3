"""Calling a run's target: HTTP/1.1 on pooled connections behind the egress policy (`worker.http1`), or a Kafka topic.

A call never raises for what the target did: it returns a `CallResult` the outcome logic classifies. Error codes
in PERMANENT_ERRORS of tickwheel.core.retry (egress_denied, invalid_target, tls_certificate) make the run dead
at once; every other error (timeout, connection_error, dns_failure, kafka_unavailable) is retried.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass

from yarl import URL

from schemas.messages import HttpTarget, KafkaTarget
from tickwheel.bus.kafka import KafkaProducer
from tickwheel.core.targets import PLATFORM_TOPIC_PREFIX, header_refusal, topic_refusal
from tickwheel.egress import EgressPolicy, UnresolvedHost, parsed_url
from tickwheel.errors import EgressRefused, Unavailable
from worker.http1 import HeaderRefused, Http1Client

USER_AGENT = "tickwheel/0.1 (+https://www.standardwebhooks.com)"


@dataclass(frozen=True, slots=True)
class CallResult:
    """What one call produced. `delivered` is set for a Kafka target the broker acknowledged."""

    started_at_s: float
    finished_at_s: float
    status: int | None = None
    error: str | None = None
    detail: str | None = None
    retry_after: str | None = None
    excerpt: bytes = b""
    delivered: bool = False

    @property
    def seconds(self) -> float:
        return self.finished_at_s - self.started_at_s


class HttpCaller:
    """Pooled HTTP/1.1 connections (`worker.http1`) whose addresses the egress policy checked; redirects are never
    followed (a 3xx is an outcome like any other)."""

    def __init__(self, policy: EgressPolicy, excerpt_bytes: int, *, pool_size: int = 512):
        self.policy = policy
        self.excerpt_bytes = excerpt_bytes
        self._client = Http1Client(policy, user_agent=USER_AGENT, limit=pool_size)

    async def start(self) -> None:
        """Nothing to open before the first call (kept for the callers' start/close pairing)."""

    async def close(self) -> None:
        await self._client.close()

    async def call(self, target: HttpTarget, body: bytes, headers: Mapping[str, str]) -> CallResult:
        started = time.time()
        url = parsed_url(target.url)
        refused = self._refusal(url) or _header_refusal(target)
        if refused is not None:
            return CallResult(started, time.time(), error=refused[0], detail=refused[1])
        try:
            answer = await self._client.request(target.method, url, body, headers, target.timeout_s, self.excerpt_bytes)
        except EgressRefused as exc:
            return CallResult(started, time.time(), error="egress_denied", detail=exc.message)
        except TimeoutError:
            return CallResult(started, time.time(), error="timeout", detail=f"no answer within {target.timeout_s:g} s")
        except ssl.SSLCertVerificationError as exc:
            return CallResult(started, time.time(), error="tls_certificate", detail=str(exc))
        except UnresolvedHost as exc:  # the name did not resolve: the host was never reached
            return CallResult(started, time.time(), error="dns_failure", detail=str(exc))
        except OSError as exc:
            return CallResult(started, time.time(), error="connection_error", detail=_describe(exc))
        except HeaderRefused as exc:  # a header value with a line break, stored before the API refused it
            return CallResult(started, time.time(), error="invalid_target", detail=str(exc))
        return CallResult(
            started, time.time(), status=answer.status, retry_after=answer.retry_after, excerpt=answer.excerpt
        )

    def _refusal(self, url: URL) -> tuple[str, str] | None:
        """A URL the call must not even try: bad scheme, no host, or an address literal the policy refuses."""
        if url.scheme not in ("http", "https") or not url.host:
            return "invalid_target", f"target URL {url} is not an http(s) URL with a host"
        try:
            self.policy.check_literal(url.host)
        except EgressRefused as exc:
            return "egress_denied", exc.message
        return None


class KafkaCaller:
    """Produce a run's payload to the job's topic, if the tenant may use it; the run id travels as a header.
    `platform_prefix` is the deployment's topic prefix: topics under `<platform_prefix>tickwheel.` are the
    platform's own and no tenant may produce to them."""

    def __init__(self, producer: KafkaProducer, platform_prefix: str = ""):
        self.producer = producer
        self.platform_topics = platform_prefix + PLATFORM_TOPIC_PREFIX

    async def call(
        self, target: KafkaTarget, allowed_prefix: str, key: bytes, body: bytes, headers: Mapping[str, str]
    ) -> CallResult:
        started = time.time()
        refusal = topic_refusal(target.topic, allowed_prefix, self.platform_topics)
        if refusal is not None:
            return CallResult(started, time.time(), error="invalid_target", detail=refusal)
        kafka_headers = [(name, value.encode()) for name, value in headers.items()]
        try:
            await self.producer.send(target.topic, body, key=key, headers=kafka_headers)
        except Unavailable as exc:
            return CallResult(started, time.time(), error="kafka_unavailable", detail=exc.message)
        return CallResult(started, time.time(), delivered=True)


def _header_refusal(target: HttpTarget) -> tuple[str, str] | None:
    """A connection-level header or a bad value the API refuses today, in a job stored before the rule existed:
    dead at once, not a crash (the platform's own names are overridden by `call_headers` instead)."""
    for name, value in target.headers.items():
        refusal = header_refusal(name, value, platform_too=False)
        if refusal is not None:
            return "invalid_target", refusal
    return None


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:500]
