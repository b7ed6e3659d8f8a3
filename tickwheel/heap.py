"""The cyclic garbage collector of a long-running process: what it may skip, and how often it runs.

Every CQL request leaves ~34 objects in reference cycles (the driver's response future with its timer, event,
query plan and callbacks), which only the cyclic collector frees. With CPython's defaults (a young collection
every 700 net allocations, the older generations every 10 of the younger) a worker spent ~14 % of its CPU and an
API ~6 % collecting, most of it traversing again and again the ~85,000 objects start-up made (modules, the
driver's schema metadata, settings), which live as long as the process (BENCHMARKS.md "Cost per run, round 4").
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000
"""Net allocations between young collections (CPython's default is 700): the cycles of a few hundred requests,
a few MB at most, freed a few times a second rather than dozens."""


def settle_after_start() -> None:
    """Call once a process has started: collect, then freeze what is left (never traversed again) and collect the
    young generation every `YOUNG_THRESHOLD` net allocations."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
