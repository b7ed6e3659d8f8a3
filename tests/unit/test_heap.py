"""A started process freezes what start-up made and collects its young generation less often."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from tickwheel import heap


@pytest.fixture
def restored_collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restored_collector")
def test_after_start_the_objects_of_start_up_are_frozen_and_young_collections_are_rarer() -> None:
    started: list[list[int]] = [[]]  # something start-up made and keeps
    _, middle, old = gc.get_threshold()
    assert any(tracked is started for tracked in gc.get_objects())
    heap.settle_after_start()
    assert not any(tracked is started for tracked in gc.get_objects())  # frozen: no collection traverses it
    assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, middle, old)
    assert gc.get_threshold()[0] > 700  # CPython's default
