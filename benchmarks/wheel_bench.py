"""Timing wheel vs a heapq scheduler, and firing jitter under an asyncio loop. A benchmark, not a test.

    .venv/bin/python benchmarks/wheel_bench.py            # all sizes, both rates (< 60 s on the 2-core box)
    .venv/bin/python benchmarks/wheel_bench.py --quick    # 10k and 100k only, 1 s jitter runs

Throughput workload (same operations on both): N runs due uniformly over a 2-minute preload window
(the dispatcher's horizon), 10 % of them cancelled, then the clock advanced 1 ms at a time through the
window, popping everything due. Jitter: N fires/s scheduled over a few seconds; one asyncio task advances
the wheel and sleeps until `next_due_ms()`; jitter = moment the run is handed out - its due time.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import heapq
import random
import statistics
import time
from collections.abc import Callable

from tickwheel.core.wheel import TimingWheel

WINDOW_MS = 120_000


class HeapScheduler:
    """The baseline: heapq with lazy cancellation, same API and ordering guarantees as the wheel."""

    __slots__ = ("_heap", "_live", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, int, int]] = []
        self._live: dict[int, tuple[int, int, int, int]] = {}
        self._seq = 0

    def insert(self, key: int, due_ms: int, value: int) -> bool:
        if key in self._live:
            return False
        entry = (due_ms, self._seq, key, value)
        self._seq += 1
        self._live[key] = entry
        heapq.heappush(self._heap, entry)
        return True

    def cancel(self, key: int) -> bool:
        return self._live.pop(key, None) is not None

    def advance(self, now_ms: int) -> list[tuple[int, int, int]]:
        heap, live, out = self._heap, self._live, []
        while heap and heap[0][0] <= now_ms:
            entry = heapq.heappop(heap)
            if live.get(entry[2]) is entry:
                del live[entry[2]]
                out.append((entry[0], entry[2], entry[3]))
        return out


def workload(n: int, seed: int = 7) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    dues = [rng.randrange(1, WINDOW_MS) for _ in range(n)]
    cancels = rng.sample(range(n), n // 10)
    return dues, cancels


def run(
    make: Callable[[], HeapScheduler | TimingWheel[int, int]], dues: list[int], cancels: list[int]
) -> tuple[float, int]:
    sched = make()
    gc.collect()
    gc.disable()
    began = time.perf_counter()
    insert = sched.insert
    for key, due in enumerate(dues):
        insert(key, due, key)
    for key in cancels:
        sched.cancel(key)
    advance, fired = sched.advance, 0
    for now in range(WINDOW_MS + 1):
        fired += len(advance(now))
    elapsed = time.perf_counter() - began
    gc.enable()
    return elapsed, fired


def throughput(sizes: list[int]) -> None:
    print("| pending | wheel s | heapq s | heapq / wheel | wheel ops/s |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for n in sizes:
        dues, cancels = workload(n)
        wheel_s, wheel_fired = run(lambda: TimingWheel[int, int](start_ms=0), dues, cancels)
        heap_s, heap_fired = run(HeapScheduler, dues, cancels)
        assert wheel_fired == heap_fired == n - len(cancels)
        ops = (2 * n + len(cancels)) / wheel_s  # insert + fire per run, plus cancels
        print(f"| {n:,} | {wheel_s:.2f} | {heap_s:.2f} | {heap_s / wheel_s:.2f}x | {ops:,.0f} |")


async def fire_loop(rate_per_s: int, seconds: float) -> list[float]:
    """Preload rate*seconds fires due from 200 ms after the clock starts; return each fire's lateness in ms."""
    loop = asyncio.get_running_loop()
    wheel: TimingWheel[int, int] = TimingWheel(start_ms=0)
    count = int(rate_per_s * seconds)
    rng = random.Random(11)
    for key in range(count):  # the preload, before the clock starts
        wheel.insert(key, 200 + rng.randrange(int(seconds * 1000)), key)
    origin = loop.time()

    def now_ms() -> float:
        return (loop.time() - origin) * 1000.0

    lateness: list[float] = []
    while len(wheel):
        current = now_ms()
        for due_ms, _, _ in wheel.advance(int(current)):
            lateness.append(now_ms() - due_ms)
        next_due = wheel.next_due_ms()
        if next_due is not None:
            await asyncio.sleep(max(0.0, (next_due - now_ms()) / 1000.0))
    return lateness


def jitter(rates: list[int], seconds: float) -> None:
    print("| fires/s | fires | p50 ms | p99 ms | max ms |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for rate in rates:
        lateness = asyncio.run(fire_loop(rate, seconds))
        cuts = statistics.quantiles(lateness, n=100)
        print(f"| {rate:,} | {len(lateness):,} | {cuts[49]:.2f} | {cuts[98]:.2f} | {max(lateness):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="skip 1M pending and shorten jitter runs")
    args = parser.parse_args()
    throughput([10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000])
    print()
    jitter([10_000, 50_000], 1.0 if args.quick else 3.0)


if __name__ == "__main__":
    main()
