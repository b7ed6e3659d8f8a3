"""Property tests: next_fire against a brute-force minute-by-minute oracle, around real DST changes.

The oracle shares only the field predicate (`CronExpr.matches`, itself checked against croniter.match below)
with the engine. It applies the policy by definition: elapsed-time jobs fire at every UTC minute whose local
reading matches; fixed-time jobs map every matching local minute to its instants (a gap: the first instant
whose reading is past it, or nothing under SKIP; a repeat: the first, second or both instants).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tickwheel.core.cron import CronExpr, parse_cron
from tickwheel.core.schedule import CronSchedule, DstGapPolicy, DstRepeatPolicy, next_fire

ZONES = [
    "America/New_York",
    "Europe/London",
    "Europe/Dublin",
    "Australia/Lord_Howe",
    "Australia/Sydney",
    "America/Sao_Paulo",
    "America/Havana",
    "Asia/Beirut",
    "America/Santiago",
    "Pacific/Chatham",
    "Antarctica/Troll",
    "Africa/Casablanca",
    "Asia/Kathmandu",
    "Asia/Kolkata",
    "Pacific/Apia",
]
MINUTE = timedelta(minutes=1)
WINDOW = timedelta(hours=20)

minutes = st.sampled_from(["*", "*/15", "0", "30", "0,30", "5-20/5", "59", "*/7"])
hours = st.sampled_from(["*", "*/2", "*/3", "0", "1", "2", "3", "0-3", "1,2", "23", "2-4/2", "0,12"])
doms = st.sampled_from(["*", "*", "1-31", "1,15", "L", "28-31"])
months = st.sampled_from(["*", "*", "1-6", "3,4,9,10,11"])
dows = st.sampled_from(["*", "*", "*", "0", "1-5", "6"])


@st.composite
def expressions(draw: st.DrawFn) -> str:
    return " ".join(draw(field) for field in (minutes, hours, doms, months, dows))


def transitions(tz: ZoneInfo, year: int) -> list[datetime]:
    """UTC instants (to the minute) where the zone's offset changes during `year`."""
    found, day = [], datetime(year, 1, 1, tzinfo=UTC)
    while day.year == year:
        nxt = day + timedelta(days=1)
        if day.astimezone(tz).utcoffset() != nxt.astimezone(tz).utcoffset():
            lo, hi = day, nxt
            while hi - lo > MINUTE:
                mid = lo + (hi - lo) / 2
                mid = mid.replace(second=0, microsecond=0)
                if mid.astimezone(tz).utcoffset() == lo.astimezone(tz).utcoffset():
                    lo = mid if mid > lo else lo + MINUTE
                else:
                    hi = mid
            found.append(hi)
        day = nxt
    return found


def reading(at: datetime, tz: ZoneInfo) -> datetime:
    return at.astimezone(tz).replace(tzinfo=None, fold=0)


def oracle(expr: CronExpr, tz: ZoneInfo, gap: DstGapPolicy, repeat: DstRepeatPolicy, lo: datetime) -> list[datetime]:
    """Every fire in (lo, lo + WINDOW], brute force."""
    hi = lo + WINDOW
    if expr.hour_star:
        base = lo.replace(second=0, microsecond=0)
        instants = [base + MINUTE * i for i in range(1, int(WINDOW / MINUTE) + 1)]
        return [at for at in instants if lo < at <= hi and expr.matches(reading(at, tz))]
    fires: set[datetime] = set()
    local = reading(lo, tz).replace(second=0, microsecond=0) - timedelta(hours=4)
    while local <= reading(hi, tz) + timedelta(hours=4):
        if expr.matches(local):
            fires.update(instants_of(local, tz, gap, repeat))
        local += MINUTE
    return sorted(at for at in fires if lo < at <= hi)


def instants_of(local: datetime, tz: ZoneInfo, gap: DstGapPolicy, repeat: DstRepeatPolicy) -> list[datetime]:
    first = local.replace(tzinfo=tz, fold=0).astimezone(UTC)
    second = local.replace(tzinfo=tz, fold=1).astimezone(UTC)
    real = [at for at in sorted({first, second}) if reading(at, tz) == local]
    if not real:  # in a gap
        if gap is DstGapPolicy.SKIP:
            return []
        at = min(first, second)
        while reading(at, tz) <= local:
            at += MINUTE
        return [at]
    if len(real) == 1 or repeat is DstRepeatPolicy.BOTH:
        return real
    return [real[0]] if repeat is DstRepeatPolicy.FIRST else [real[1]]


def engine(schedule: CronSchedule, lo: datetime, limit: int) -> list[datetime]:
    found: list[datetime] = []
    at = next_fire(schedule, lo)
    while at is not None and at <= lo + WINDOW and len(found) < limit:
        found.append(at)
        at = next_fire(schedule, at)
    return found


@settings(max_examples=50, deadline=None)
@given(
    expr=expressions(),
    zone=st.sampled_from(ZONES),
    year=st.integers(1995, 2140),
    pick=st.integers(0, 7),
    lead_min=st.integers(0, 18 * 60),
    gap=st.sampled_from(list(DstGapPolicy)),
    repeat=st.sampled_from(list(DstRepeatPolicy)),
)
def test_next_fire_matches_the_brute_force_oracle_around_dst_changes(
    expr: str, zone: str, year: int, pick: int, lead_min: int, gap: DstGapPolicy, repeat: DstRepeatPolicy
) -> None:
    tz = ZoneInfo(zone)
    changes = transitions(tz, year) or [datetime(year, 6, 1, tzinfo=UTC)]
    lo = changes[pick % len(changes)] - timedelta(minutes=lead_min) + timedelta(seconds=pick * 7)
    expected = oracle(parse_cron(expr), tz, gap, repeat, lo)[:150]
    assert engine(CronSchedule(expr, zone, gap, repeat), lo, 150) == expected


@settings(max_examples=200, deadline=None)
@given(
    minute=st.sampled_from(["*", "*/5", "7", "0-30", "10,20,40"]),
    hour=st.sampled_from(["*", "*/4", "3", "9-17", "0,23"]),
    dom=st.sampled_from(["*", "1", "15", "1-10", "L", "31"]),
    month=st.sampled_from(["*", "2", "1-6", "JAN,JUL"]),
    dow=st.sampled_from(["*", "0", "1-5", "SAT", "3,5"]),  # croniter ANDs `#` with day-of-month; we OR
    at=st.datetimes(datetime(1990, 1, 1), datetime(2200, 1, 1)),
)
def test_field_predicate_agrees_with_croniter_match(
    minute: str, hour: str, dom: str, month: str, dow: str, at: datetime
) -> None:
    text = f"{minute} {hour} {dom} {month} {dow}"
    assume(not (dom == "31" and month == "2"))  # rejected up front: never fires
    at = at.replace(second=0, microsecond=0)
    assert parse_cron(text).matches(at) == croniter.match(text, at)


NASTY = [
    ("0 0 29 2 1", "America/New_York"),
    ("0 0 * 2 1#5", "Europe/London"),
    ("59 23 31 12 *", "Pacific/Apia"),
    ("*/15 * * * *", "Australia/Lord_Howe"),
    ("* 2 * * *", "America/Havana"),
    ("0 0 L 2 *", "Asia/Beirut"),
    ("0 0 29 2 *", "UTC"),
    ("* * * * * *", "America/New_York"),
    ("0 30 2 * 3 *", "America/New_York"),
]


def test_every_search_on_nasty_schedules_ends_with_a_later_fire() -> None:
    # The search is bounded by construction (occurrence.MAX_CANDIDATES, cron.MAX_SEARCH_MONTHS); its speed is
    # measured in benchmarks/wheel_bench.py, not asserted here (timed tests fail on a loaded box).
    starts = [datetime(y, m, 1, tzinfo=UTC) for y in (2026, 2096, 2099, 2300) for m in (1, 3, 10, 11)]
    for expr, zone in NASTY:
        schedule = CronSchedule(expr, zone, dst_repeat=DstRepeatPolicy.BOTH)
        for start in starts:
            fire = next_fire(schedule, start)
            assert fire is not None and fire > start, (expr, zone, start)
