"""Per-job policies for daylight-saving changes and missed occurrences (see docs/time.md)."""

from __future__ import annotations

from enum import StrEnum


class DstGapPolicy(StrEnum):
    """What a fixed-time cron job does when its local time falls in a spring-forward gap."""

    RUN_AFTER_GAP = "run_after_gap"  # run at the first instant after the gap (default)
    SKIP = "skip"  # do not run that day


class DstRepeatPolicy(StrEnum):
    """What a fixed-time cron job does when its local time occurs twice at a fall-back change."""

    FIRST = "first"  # run once, at the first occurrence (default)
    SECOND = "second"  # run once, at the second occurrence
    BOTH = "both"  # run at both occurrences


class CatchUpPolicy(StrEnum):
    """Which missed occurrences run after an outage: the latest only, all (bounded), or none (`skip`; the
    stored spelling `none` of older jobs reads as SKIP)."""

    LATEST = "latest"
    ALL = "all"
    SKIP = "skip"

    @classmethod
    def _missing_(cls, value: object) -> CatchUpPolicy | None:
        return cls.SKIP if value == "none" else None


class OverlapPolicy(StrEnum):
    """What an occurrence does when an earlier run of its job is still in flight (Temporal's names)."""

    ALLOW = "allow"  # start it anyway
    SKIP = "skip"  # do not run it
    BUFFER_ONE = "buffer_one"  # wait for the earlier run to finish; a further one meanwhile is skipped


class DstFlag(StrEnum):
    """How a DST rule touched a fire, as shown in previews."""

    SHIFTED = "shifted"  # its local time fell in a gap; moved to the first instant after it
    REPEATED = "repeated"  # its local time occurs twice and the job runs at both
    SKIPPED_SIBLING = "skipped_sibling"  # its local time occurs twice; the other occurrence does not run
    AFTER_SKIPPED_GAP = "after_skipped_gap"  # an occurrence before it fell in a gap and was skipped
