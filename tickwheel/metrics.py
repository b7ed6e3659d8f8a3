"""Every Prometheus metric of the platform, in one module. Labels are bounded (lane, outcome, reason, tier):
never a tenant, job or run id. Durations are in seconds."""

from __future__ import annotations

import functools
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300)

# api
api_requests = Counter("tickwheel_api_requests_total", "API requests answered", ["method", "route", "status"])
api_latency = Histogram("tickwheel_api_request_seconds", "API request latency", ["method", "route"])
jobs_created = Counter("tickwheel_jobs_created_total", "Jobs created", ["schedule_type"])
api_shed = Counter(
    "tickwheel_api_shed_total",
    "API requests shed by admission control (503 + Retry-After before any work), by reason (core.admission)",
    ["reason"],
)
api_in_flight = Gauge("tickwheel_api_in_flight", "API requests being worked on (probe routes aside)")
api_waiting = Gauge("tickwheel_api_waiting", "API requests waiting for an admission slot")
api_loop_lag = Gauge("tickwheel_api_loop_lag_seconds", "How late the API's event loop ran its last lag probe")
near_announced = Counter("tickwheel_near_announced_total", "Runs announced on the near-term topic")
audit_records = Counter("tickwheel_audit_records_total", "Job changes written to the audit log", ["action"])
audit_write_failures = Counter(
    "tickwheel_audit_write_failures_total", "Job changes applied whose audit record could not be written"
)
dead_letters_purged = Counter("tickwheel_dead_letters_purged_total", "Dead letters deleted by tenants", ["how"])

# dispatcher
fire_lag = Histogram(
    "tickwheel_fire_lag_seconds", "Fired minus due time of a run row", ["lane"], buckets=LAG_BUCKETS
)
fired = Counter("tickwheel_fired_total", "Run rows produced onto lane topics", ["lane", "kind"])
fire_errors = Counter(
    "tickwheel_fire_errors_total", "Rows whose firing failed with an unexpected error (each is tried again)"
)
wheel_size = Gauge("tickwheel_wheel_entries", "Entries waiting in the dispatcher's timing wheel")
fire_queued = Gauge("tickwheel_fire_queued", "Rows due, out of the wheel, waiting for their lane's send window")
owned_shards = Gauge("tickwheel_owned_shards", "Shards this dispatcher owns")
preload_seconds = Histogram("tickwheel_preload_seconds", "Time to read one minute bucket of the owned shards")
checkpoint_lag = Gauge(
    "tickwheel_checkpoint_lag_seconds", "Now minus the oldest fired-through watermark owned"
)
lease_checks = Counter(
    "tickwheel_lease_checks_total",
    "Lease check rows read when due: lapsed ones go to a worker, kept ones (the run finished) end here",
    ["result"],
)
near_received = Counter("tickwheel_near_received_total", "Near-term announcements consumed", ["result"])
rescan_found = Counter("tickwheel_rescan_found_total", "Runs the safety rescan found that preload had missed")
chained = Counter("tickwheel_chained_total", "Next occurrences written when firing", ["result"])
spread = Counter("tickwheel_spread_total", "Runs moved inside their delay tolerance at a peak")

# coordinator
assignment_epoch = Gauge("tickwheel_assignment_epoch", "Epoch of the published shard assignment")
unowned_shards = Gauge("tickwheel_unowned_shards", "Shards with no live owner in the published assignment")
dispatchers_live = Gauge("tickwheel_dispatchers_live", "Dispatchers registered in ZooKeeper")
members_evicted = Counter(
    "tickwheel_members_evicted_total",
    "Dispatchers evicted before their session expired, by what the probe found (refused: gone, silent: stopped)",
    ["reason"],
)
far_moved = Counter("tickwheel_far_moved_total", "Runs the mover took from runs_far", ["result"])
sweeper_repairs = Counter(
    "tickwheel_sweeper_repairs_total", "Jobs whose next run the sweeper repaired", ["reason"]
)
reconciler_findings = Counter(
    "tickwheel_reconciler_findings_total",
    "Promised occurrences the reconciler found without a run, by verdict (repaired, or why it was missed)",
    ["verdict"],
)
forecast_due = Gauge("tickwheel_forecast_due_runs", "Runs due in a coming minute", ["minutes_ahead"])

# worker
runs_finished = Counter("tickwheel_runs_finished_total", "Attempts finished", ["lane", "outcome"])
run_seconds = Histogram("tickwheel_run_call_seconds", "Duration of a target call", ["lane", "target"])
start_lag = Histogram(
    "tickwheel_start_lag_seconds", "Call start minus scheduled time", ["lane"], buckets=LAG_BUCKETS
)
claims = Counter("tickwheel_claims_total", "Claim attempts", ["result"])
deferrals = Counter("tickwheel_deferrals_total", "Runs deferred without spending an attempt", ["reason"])
dead_letters = Counter("tickwheel_dead_letters_total", "Runs dead-lettered", ["reason"])
inflight = Gauge("tickwheel_worker_inflight", "Calls in flight", ["lane"])
fair_queue = Gauge(
    "tickwheel_worker_fair_queue", "Consumed runs waiting for a slot in the lane's fair-share queue", ["lane"]
)
notifications = Counter(
    "tickwheel_notifications_total", "Run-event notifications by outcome", ["event", "result"]
)
notification_queue = Gauge("tickwheel_notification_queue", "Run-event notifications waiting to be sent")
lease_timeouts = Counter("tickwheel_lease_timeouts_total", "Runs whose lease expired while RUNNING")
async_completions = Counter(
    "tickwheel_async_completions_total",
    "Asynchronous runs: held after a 202, outcomes reported (or refused) by the API, recorded by a worker",
    ["event"],
)

# adapters
cql_statements = Counter(
    "tickwheel_cql_statements_total", "CQL requests sent (a batch is one), by kind", ["kind"]
)
backend_errors = Counter("tickwheel_backend_errors_total", "Errors talking to a server", ["backend"])
lwt_settled = Counter(
    "tickwheel_lwt_settled_total",
    "Conditional writes whose send failed, settled by a SERIAL read: found applied, or sent again",
    ["result"],
)
redis_fail_open = Counter(
    "tickwheel_redis_fail_open_total",
    "Checks made without Redis (it did not answer): held in the process only (rate, job_slots, auth_failures,"
    " revocation), or not at all (flow_acquire, flow_release)",
    ["check"],
)


@functools.lru_cache(maxsize=1024)
def child(metric: Any, *labels: str) -> Any:
    """`metric.labels(*labels)`, looked up once: `labels` validates and takes a lock on every call (a few of them per
    run were ~2 % of a busy worker's event loop). Labels are bounded, and so is this cache."""
    return metric.labels(*labels)
