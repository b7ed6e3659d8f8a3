"""The cyclic garbage collector of a long-running process: what it may skip, and how often it runs.

With CPython's defaults (a young collection every 700 net allocations, the older generations every 10 of the
younger) the processes spent 6-14 % of their CPU collecting (a worker at 60 runs/s: 0.9 s of collections in 50 s),
most of it traversing again and again the ~85,000 objects start-up made (modules, the driver's schema metadata,
settings), which live as long as the process. Frozen after start-up, they are never traversed again; the young
generation, collected less often, holds what the libraries' own cycles leave (each CQL request left ~34 objects
in cycles until `store.cassandra._await` stopped tying them; BENCHMARKS.md "Cost per run, round 4").
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000
"""Net allocations between young collections (CPython's default is 700): a few MB of garbage cycles at most,
freed a few times a second rather than dozens."""


def settle_after_start() -> None:
    """Call once a process has started: collect, then freeze what is left (never traversed again) and collect the
    young generation every `YOUNG_THRESHOLD` net allocations."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
