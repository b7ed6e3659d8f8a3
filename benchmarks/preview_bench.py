"""How much event-loop time one preview costs, by fire count: the figure behind the API's preview cap (100)
and its charge against the tenant's request rate (ceil(count / 2) requests).

    .venv/bin/python -m benchmarks.preview_bench
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from tickwheel.core.schedule import preview
from tickwheel.core.specs import CronSchedule

EXPRESSIONS = [
    ("0 0 29 2 *", "Europe/Paris"),
    ("30 2 * * *", "America/New_York"),
    ("0 0 29 2 1", "UTC"),
    ("* * * * *", "Australia/Lord_Howe"),
    ("0 0 31 * *", "UTC"),
]
COUNTS = (10, 100, 1000)
REPEATS = 5


def best_ms(schedule: CronSchedule, count: int) -> float:
    """The fastest of REPEATS previews (the least disturbed by the shared box)."""
    after = datetime(2026, 12, 1, tzinfo=UTC)
    timings = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        preview(schedule, after, count, tz=schedule.tz)
        timings.append(time.perf_counter() - started)
    return min(timings) * 1000


def main() -> None:
    print("| expression | zone | " + " | ".join(f"{c} fires" for c in COUNTS) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in COUNTS) + " |")
    for expr, tz in EXPRESSIONS:
        schedule = CronSchedule(expr=expr, tz=tz)
        cells = " | ".join(f"{best_ms(schedule, count):.1f} ms" for count in COUNTS)
        print(f"| `{expr}` | {tz} | {cells} |")


if __name__ == "__main__":
    main()
