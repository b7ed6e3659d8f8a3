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
    """Which missed occurrences run after an outage: the latest only, all (bounded), or none."""

    LATEST = "latest"
    ALL = "all"
    NONE = "none"


class DstFlag(StrEnum):
    """How a DST rule touched a fire, as shown in previews."""

    SHIFTED = "shifted"  # its local time fell in a gap; moved to the first instant after it
    REPEATED = "repeated"  # its local time occurs twice and the job runs at both
    SKIPPED_SIBLING = "skipped_sibling"  # its local time occurs twice; the other occurrence does not run
    AFTER_SKIPPED_GAP = "after_skipped_gap"  # an occurrence before it fell in a gap and was skipped
