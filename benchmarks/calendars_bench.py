"""Cost of one next-fire search (what the dispatcher's chain pays per fire of a recurring job) for a plain cron
job, the same job with several calendars, and with exclusions; side by side in one process, so the ratios hold
on a noisy box.

    .venv/bin/python -m benchmarks.calendars_bench [--fires 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, date, datetime

from tickwheel.core.calendars import Calendar, DateRange, Exclusions
from tickwheel.core.schedule import CronSchedule, next_fire

START = datetime(2026, 1, 1, tzinfo=UTC)
HOLIDAYS = tuple(DateRange(date(2026, m, 1), date(2026, m, 2)) for m in range(1, 13))

CASES = {
    "one expression": CronSchedule("0 9 * * 1-5", "Europe/Paris"),
    "3 calendars": CronSchedule(
        "0 9 * * 1-5", "Europe/Paris", calendars=(Calendar("0 11 * * 0,6", "Europe/Paris"),
                                                  Calendar("0 17 * * 5", "America/New_York")),
    ),
    "10 calendars": CronSchedule(
        "0 9 * * 1-5", "Europe/Paris", calendars=tuple(Calendar(f"{m} 10 * * *", "Asia/Tokyo") for m in range(9)),
    ),
    "exclusions (24 holiday dates, 2 except)": CronSchedule(
        "0 9 * * 1-5", "Europe/Paris",
        exclusions=Exclusions("Europe/Paris", HOLIDAYS, ("0 9 * * 3", "0 9 1-7 * 1"), frozenset()),
    ),
}  # fmt: skip


def per_fire_us(schedule: CronSchedule, fires: int, rounds: int) -> float:
    """Microseconds per next_fire call walking `fires` fires from START: the best of `rounds` walks (the box is
    shared; the minimum is the least disturbed)."""
    best = float("inf")
    for _ in range(rounds):
        at: datetime | None = START
        began = time.perf_counter()
        for _ in range(fires):
            assert at is not None
            at = next_fire(schedule, at)
        best = min(best, time.perf_counter() - began)
    return best / fires * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fires", type=int, default=2_000, help="fires walked per round (~8 years of weekdays)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    costs = {name: per_fire_us(schedule, args.fires, args.rounds) for name, schedule in CASES.items()}
    base = costs["one expression"]
    print(f"{'case':42} {'us/fire':>9} {'ratio':>6}")
    for name, cost in costs.items():
        print(f"{name:42} {cost:9.1f} {cost / base:6.2f}")
    print("load average:", open("/proc/loadavg").read().strip())  # noqa: SIM115 (one read)


if __name__ == "__main__":
    main()
