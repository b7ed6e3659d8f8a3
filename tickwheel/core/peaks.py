"""Deterministic spreading of runs that may start late, so a second over capacity flattens out."""

from __future__ import annotations

import hashlib
import uuid


def spread_fire_ms(
    due_ms: int, tolerance_ms: int, key: bytes | uuid.UUID, load_in_second: int, capacity_per_s: int
) -> int:
    """When the run's second holds more than `capacity_per_s` runs, move it to a point inside
    [due, due + tolerance] chosen by a hash of `key` (the run id); never earlier, urgent (tolerance 0) never moved.

    The window used is the smaller of the tolerance and the time the overload needs at capacity
    (load / capacity seconds), so a mild overload moves runs only a little.
    """
    if tolerance_ms <= 0 or capacity_per_s <= 0 or load_in_second <= capacity_per_s:
        return due_ms
    needed_ms = -(-load_in_second * 1000 // capacity_per_s)
    window_ms = min(tolerance_ms, needed_ms)
    raw = key.bytes if isinstance(key, uuid.UUID) else key
    point = int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big")
    return due_ms + point % (window_ms + 1)
