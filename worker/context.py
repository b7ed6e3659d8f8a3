"""What the worker reads before it may call a run's target: the run, its job and the job's tenant."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from schemas.messages import DueRun, HttpTarget, JobDefinition, KafkaTarget
from tickwheel.egress import canonical_authority, canonical_host, parsed_url
from tickwheel.settings import WorkerSettings
from tickwheel.store.records import NewRun, Tenant
from tickwheel.tenancy import TenantCache as TenantCache


@dataclass(frozen=True, slots=True)
class RunContext:
    """One run about to be tried: everything the claim, the call and the outcome need."""

    due: DueRun
    run: NewRun
    definition: JobDefinition
    tenant: Tenant
    unread: bool = False
    """The job was not read: its definition and version came with the due row (a once job's first attempt), so the
    claim also asks that no change of the job has begun since (`runs.claim(unchanged=True)`)."""

    @property
    def log(self) -> dict[str, Any]:
        """The run's ids for a log record's `extra`."""
        return {"tenant": self.run.tenant_id, "job_id": str(self.run.job_id), "run_id": str(self.run.run_id)}

    @property
    def scheduled_at(self) -> datetime:
        return self.run.scheduled_at

    def target_host(self) -> str:
        """The flow-control and dead-letter key of the target: the URL's host in its one spelling
        (`canonical_host`), or the Kafka topic."""
        target = self.definition.target
        if isinstance(target, KafkaTarget):
            return f"kafka:{target.topic}"
        return canonical_host(parsed_url(target.url).host or "-")

    def flow_key(self) -> str:
        """What breakers and limits are keyed by: the target's host and port (`canonical_authority`), or the
        Kafka topic."""
        target = self.definition.target
        if isinstance(target, KafkaTarget):
            return f"kafka:{target.topic}"
        return canonical_authority(target.url)

    def call_timeout_s(self, settings: WorkerSettings) -> float:
        target = self.definition.target
        return target.timeout_s if isinstance(target, HttpTarget) else 10.0

    def lease_s(self, settings: WorkerSettings) -> float:
        """How long a claim holds the run: long enough for the call, its timeout and recording the outcome."""
        return max(float(settings.lease_s), self.call_timeout_s(settings) + settings.lease_margin_s)
