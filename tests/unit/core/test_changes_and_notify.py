"""Pure decisions around a run: the audit diff, notification routes and events, retention."""

from __future__ import annotations

import pytest

from tickwheel.core.changes import json_diff
from tickwheel.core.notify import RunEvent, event_id, events_of, recovered, route_of
from tickwheel.core.retention import DAY_S, retention_s


def test_a_diff_names_each_changed_leaf_with_its_old_and_new_value() -> None:
    before = {"state": "ACTIVE", "schedule": {"expr": "0 9 * * *", "tz": "UTC"}, "labels": {"a/b": "1"}}
    after = {"state": "ACTIVE", "schedule": {"expr": "30 9 * * *", "tz": "UTC"}, "labels": {}, "name": "n"}
    assert json_diff(before, after) == [
        {"op": "remove", "path": "/labels/a~1b", "old": "1"},
        {"op": "add", "path": "/name", "value": "n"},
        {"op": "replace", "path": "/schedule/expr", "old": "0 9 * * *", "value": "30 9 * * *"},
    ]


def test_a_list_or_a_changed_type_is_replaced_whole_and_equal_documents_have_no_diff() -> None:
    assert json_diff({"codes": [200, 201]}, {"codes": [200]}) == [
        {"op": "replace", "path": "/codes", "old": [200, 201], "value": [200]}
    ]
    assert json_diff({"n": 1}, {"n": 1.0}) == [{"op": "replace", "path": "/n", "old": 1, "value": 1.0}]
    assert json_diff({"a": {"b": [1]}}, {"a": {"b": [1]}}) == []
    assert json_diff({}, {"x": 1}) == [{"op": "add", "path": "/x", "value": 1}]


def test_a_jobs_route_replaces_the_tenants_and_may_borrow_its_url() -> None:
    tenant_url, tenant_events = "https://t.example/hook", ["dead"]
    assert route_of(None, None, tenant_url, tenant_events).events == {RunEvent.DEAD}  # type: ignore[union-attr]
    own = route_of("https://j.example", ["failed"], tenant_url, tenant_events)
    assert own is not None and own.url == "https://j.example" and own.events == {RunEvent.FAILED}
    borrowed = route_of(None, ["succeeded"], tenant_url, tenant_events)
    assert borrowed is not None and borrowed.url == tenant_url and borrowed.events == {RunEvent.SUCCEEDED}
    assert route_of("https://j.example", [], tenant_url, tenant_events) is None  # a job may opt out
    assert route_of(None, ["dead"], None, []) is None  # no URL anywhere
    assert route_of(None, None, None, ["dead"]) is None


@pytest.mark.parametrize(
    ("status", "attempt", "events"),
    [
        ("RETRY", 1, [RunEvent.FAILED]),
        ("DEAD", 3, [RunEvent.FAILED, RunEvent.DEAD]),
        ("SUCCEEDED", 1, [RunEvent.SUCCEEDED]),
        ("SUCCEEDED", 2, [RunEvent.SUCCEEDED, RunEvent.RECOVERED]),
        ("CANCELLED", 0, []),
        ("MISSED", 0, [RunEvent.MISSED]),  # the reconciler's report of an occurrence that never ran
    ],
)
def test_the_events_of_a_recorded_attempt(status: str, attempt: int, events: list[RunEvent]) -> None:
    assert events_of(status, attempt) == events


def test_a_first_attempt_success_recovers_only_after_a_failed_previous_run() -> None:
    assert recovered("DEAD") and recovered("RETRY")
    assert not recovered("SUCCEEDED") and not recovered(None) and not recovered("CANCELLED")


def test_event_ids_are_stable_per_run_attempt_and_event() -> None:
    assert event_id("r1", 2, RunEvent.DEAD) == "evt_r1_2_dead" != event_id("r1", 2, RunEvent.FAILED)


def test_a_tenants_retention_overrides_the_default() -> None:
    assert retention_s(30, None) == 30 * DAY_S
    assert retention_s(30, 400) == 400 * DAY_S
