"""Checks a typed job definition must pass before it is stored (each failure: 422 naming the wire field).

Types and unknown fields are checked by the codec (api.wire); this module checks values: the schedule through
the time core, target URLs and headers, limits on retries, labels and names. Whether a target's address may be
called is the worker's egress policy (tickwheel.egress), decided at call time, when DNS is resolved.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from urllib.parse import urlsplit

from schemas.messages import HttpTarget, JobDefinition, KafkaTarget, RetryDoc, ScheduleDoc
from tickwheel.core.errors import ScheduleError
from tickwheel.core.schedule import Schedule, validate
from tickwheel.core.targets import header_refusal, topic_refusal
from tickwheel.errors import InvalidInput
from tickwheel.model import schedule_of

from .templates import check_payload_template
from .wire import camel_field

TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
LABEL_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")
MAX_LABELS = 32
MAX_LABEL_VALUE = 256
MAX_NAME = 200
MAX_URL = 2048
MAX_HEADERS = 64
MIN_TIMEOUT_S = 1.0  # shorter timeouts fail on the target's normal latency: self-inflicted, not the host's
MAX_TIMEOUT_S = 900.0
MAX_TARGET_CONCURRENCY = 10_000
MAX_TARGET_RATE_PER_S = 100_000.0
# Every instant a schedule names is before this, so that any arithmetic on it (next fire, retry, lease, bucket)
# stays inside datetime's range (year 9999).
LATEST_INSTANT = datetime(9000, 1, 1, tzinfo=UTC)
SCHEDULE_INSTANTS = (("run_at", "runAt"), ("start_at", "startAt"), ("end_at", "endAt"), ("anchor_at", "anchorAt"))
MAX_ATTEMPTS = 100
MAX_TOLERANCE_S = 86_400
MAX_CATCH_UP = 1000
MAX_ASYNC_LEASE_S = 7 * 86_400  # an asynchronous run's lease, counted from its claim


def check_definition(definition: JobDefinition, *, min_interval_s: int, kafka_topic_prefix: str) -> Schedule:
    """Raise InvalidInput unless `definition` may be stored; returns its core schedule."""
    schedule = check_schedule(definition, min_interval_s)
    if isinstance(definition.target, HttpTarget):
        check_http_target(definition.target)
    else:
        check_kafka_target(definition.target, kafka_topic_prefix)
    check_retry(definition.retry_policy)
    check_payload_template(definition)
    _check_range(definition.delay_tolerance_s, 0, MAX_TOLERANCE_S, "delayToleranceS")
    check_labels(definition.labels)
    if definition.name is not None and not 0 < len(definition.name) <= MAX_NAME:
        raise InvalidInput(f"name must be 1 to {MAX_NAME} characters", field="name")
    if definition.alert_url is not None:
        check_url(definition.alert_url, "alertUrl")
    if definition.notify is not None and definition.notify.url is not None:
        check_url(definition.notify.url, "notify.url")
    if definition.async_completion is not None:
        check_async_completion(definition)
    return schedule


def check_async_completion(definition: JobDefinition) -> None:
    """Asynchronous completion needs an HTTP target (a 202 is how a call asks for it) and leases in range."""
    completion = definition.async_completion
    assert completion is not None
    if not isinstance(definition.target, HttpTarget):
        raise InvalidInput("asyncCompletion needs an http target (it answers 202 to finish later)",
                           field="asyncCompletion")  # fmt: skip
    _check_range(completion.max_lease_s, 1, MAX_ASYNC_LEASE_S, "asyncCompletion.maxLeaseS")
    _check_range(completion.lease_s, 1, completion.max_lease_s, "asyncCompletion.leaseS")


def check_schedule(definition: JobDefinition | ScheduleDoc, min_interval_s: int) -> Schedule:
    """A definition's schedule (or a schedule document alone, as the console's preview sends it), checked."""
    doc = definition.schedule if isinstance(definition, JobDefinition) else definition
    _check_range(doc.catch_up_max_count, 0, MAX_CATCH_UP, "schedule.catchUpMaxCount")
    _check_range(doc.catch_up_max_age_s, 0, 366 * 86_400, "schedule.catchUpMaxAgeS")
    try:
        schedule = schedule_of(definition)
        validate(schedule, min_interval_s=min_interval_s)
    except ScheduleError as exc:
        raise InvalidInput(exc.message, field=camel_field(exc.field)) from None
    for name, wire in SCHEDULE_INSTANTS:
        at = getattr(schedule, name, None)
        if isinstance(at, datetime) and at >= LATEST_INSTANT:
            raise InvalidInput(f"{wire} must be before {LATEST_INSTANT.date()}", field=f"schedule.{wire}")
    return schedule


def check_url(url: str, field: str) -> None:
    if len(url) > MAX_URL:
        raise InvalidInput(f"the URL is longer than {MAX_URL} characters", field=field)
    if any(c in url for c in "\r\n\t ") or not url.isprintable():
        raise InvalidInput("the URL contains whitespace or control characters", field=field)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidInput(f"the URL is not valid: {exc}", field=field) from None
    if parts.scheme not in ("http", "https"):
        raise InvalidInput("the URL must start with http:// or https://", field=field)
    if not parts.hostname:
        raise InvalidInput("the URL has no host", field=field)
    if parts.username is not None or parts.password is not None:
        raise InvalidInput("the URL must not carry credentials; send them in headers", field=field)
    if port == 0:
        raise InvalidInput("the URL's port must be 1 to 65535", field=field)


def check_http_target(target: HttpTarget) -> None:
    check_url(target.url, "target.url")
    if len(target.headers) > MAX_HEADERS:
        raise InvalidInput(f"at most {MAX_HEADERS} headers", field="target.headers")
    for name, value in target.headers.items():
        refusal = header_refusal(name, value)
        if refusal is not None:
            raise InvalidInput(refusal, field=f"target.headers.{name}")
    _check_range(target.timeout_s, MIN_TIMEOUT_S, MAX_TIMEOUT_S, "target.timeoutS")
    if target.max_concurrency is not None:
        _check_range(target.max_concurrency, 1, MAX_TARGET_CONCURRENCY, "target.maxConcurrency")
    if target.rate_per_s is not None:
        _check_range(target.rate_per_s, 0.001, MAX_TARGET_RATE_PER_S, "target.ratePerS")
    for code in target.success_codes or ():
        _check_range(code, 100, 599, "target.successCodes")


def check_kafka_target(target: KafkaTarget, topic_prefix: str) -> None:
    if not TOPIC_NAME.match(target.topic):
        raise InvalidInput("topic must be 1 to 249 of A-Z a-z 0-9 . _ -", field="target.topic")
    refusal = topic_refusal(target.topic, topic_prefix)
    if refusal is not None:
        raise InvalidInput(refusal, field="target.topic")
    if target.key is not None and len(target.key) > 1024:
        raise InvalidInput("key must be at most 1024 characters", field="target.key")


def check_retry(policy: RetryDoc) -> None:
    _check_range(policy.max_attempts, 1, MAX_ATTEMPTS, "retryPolicy.maxAttempts")
    if not 0 < policy.base_delay_s <= policy.max_delay_s <= 86_400:
        raise InvalidInput("need 0 < baseDelayS <= maxDelayS <= 86400", field="retryPolicy.baseDelayS")
    if not 0 <= policy.jitter <= 1:
        raise InvalidInput("jitter must be between 0 and 1", field="retryPolicy.jitter")
    if policy.max_age_s is not None and policy.max_age_s <= 0:
        raise InvalidInput("maxAgeS must be above 0 (or null for no limit)", field="retryPolicy.maxAgeS")


def check_labels(labels: dict[str, str]) -> None:
    if len(labels) > MAX_LABELS:
        raise InvalidInput(f"at most {MAX_LABELS} labels", field="labels")
    for key, value in labels.items():
        if not LABEL_KEY.match(key):
            raise InvalidInput(f"label key {key!r} must match {LABEL_KEY.pattern}", field=f"labels.{key}")
        if len(value) > MAX_LABEL_VALUE or not value.isprintable():
            raise InvalidInput(f"label value must be printable, at most {MAX_LABEL_VALUE}", field=f"labels.{key}")


def _check_range(value: float, low: float, high: float, field: str) -> None:
    if not low <= value <= high:  # NaN fails too
        raise InvalidInput(f"{field} must be between {low:g} and {high:g}", field=field)
