"""Pure liveness decisions: how the coordinator reads a probe of a dispatcher's health port, when it evicts a
member, and whether a dispatcher may still fire.

A dispatcher's health port is served by a thread of its own (tickwheel/health.py), so it answers while the event
loop is busy; a process that no longer answers is either gone (the port refuses: SIGKILL, a crash) or stopped
(the kernel still accepts the connection, nobody answers: SIGSTOP, a frozen VM). The coordinator evicts on two
refusals in a row, or on `silent_s` of silence; a dispatcher fires only while its member znode was confirmed
within `alive_window_s`. The window is shorter than the silence the coordinator waits for minus the probe's
timeout (`window_is_safe`), so by the time a silent member is evicted and its shards handed to another, it has
stopped firing on its own: a stopped process that resumes finds its confirmation too old and fires nothing
before it learns (its znode gone) that its shards have moved."""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace


class Answer(enum.Enum):
    """What one probe of a member's health port found."""

    REFUSED = "refused"
    """Nothing listens on the port: the process is gone."""
    ANSWERED = "answered"
    """Its health thread answered in time: the process runs."""
    SILENT = "silent"
    """Connected (or the connect timed out) but no answer within the probe's timeout: a stopped process."""
    UNKNOWN = "unknown"
    """An unreachable network, a connection reset, or a probe that overran (the prober itself stalled): proves
    nothing either way."""


@dataclass(frozen=True, slots=True)
class Probe:
    """One probe: its answer and when it was sent and done (monotonic seconds of the prober)."""

    answer: Answer
    sent_s: float
    done_s: float


@dataclass(frozen=True, slots=True)
class EvictionPolicy:
    refusals: int = 2
    """Refusals in a row that evict."""
    silent_s: float = 2.0
    """Silence that evicts: from the first unanswered probe (or the last answer, if later) to a probe's end."""
    timeout_s: float = 0.5
    """How long a probe waits for the connect and the answer together."""
    stall_slack_s: float = 1.0
    """A probe that took this much longer than its timeout measured the prober's own stall (a paused or starved
    coordinator), not the member's silence: it reads as UNKNOWN."""


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """What the prober knows about one member."""

    refusals: int = 0
    silent_since_s: float | None = None
    last_silent_s: float | None = None
    last_answer_s: float | None = None


def reading(probe: Probe, policy: EvictionPolicy) -> Answer:
    """The probe's answer as evidence: a silence measured across the prober's own stall is UNKNOWN."""
    if probe.answer is Answer.SILENT and probe.done_s - probe.sent_s > policy.timeout_s + policy.stall_slack_s:
        return Answer.UNKNOWN
    return probe.answer


def observe(record: MemberRecord, probe: Probe, policy: EvictionPolicy) -> tuple[MemberRecord, bool]:
    """Fold one probe into the member's record; True when the member is to be evicted."""
    answer = reading(probe, policy)
    if answer is Answer.ANSWERED:
        return MemberRecord(last_answer_s=probe.done_s), False
    if answer is Answer.REFUSED:
        record = replace(record, refusals=record.refusals + 1)
        return record, record.refusals >= policy.refusals
    if answer is Answer.UNKNOWN:  # the silence so far may have ended unseen: count it again from the next one
        return replace(record, silent_since_s=None, last_silent_s=None), False
    since = record.silent_since_s
    if since is None or record.last_silent_s is None or probe.sent_s - record.last_silent_s > policy.silent_s:
        since = probe.sent_s  # a fresh silence, or one watched with a gap too long to vouch for
    if record.last_answer_s is not None:
        since = max(since, record.last_answer_s)  # probes may overlap: an answer seen later ends the silence
    record = replace(record, silent_since_s=since, last_silent_s=probe.done_s)
    return record, probe.done_s - since >= policy.silent_s


def window_is_safe(alive_window_s: float, policy: EvictionPolicy, margin_s: float = 0.25) -> bool:
    """Whether a dispatcher firing only within `alive_window_s` of its last confirmation has stopped before the
    coordinator evicts it for silence. The first unanswered probe is sent less than `timeout_s` before the process
    stopped (an earlier one would have been answered), so eviction comes at least `silent_s - timeout_s` after the
    last confirmation; the margin covers a ZooKeeper follower's stale read and the clocks' rates."""
    return alive_window_s + margin_s <= policy.silent_s - policy.timeout_s


def alive_within(since_alive_s: float, alive_window_s: float) -> bool:
    """The dispatcher's own half of the bargain: its member znode was confirmed within the window."""
    return since_alive_s < alive_window_s
