"""store.coordinators: a node just back up, or that let a request time out, is the last one asked to coordinate."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
from cassandra import OperationTimedOut
from cassandra.cluster import ResponseFuture
from cassandra.policies import DCAwareRoundRobinPolicy

from tickwheel.errors import Unavailable
from tickwheel.settings import CassandraSettings
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.coordinators import WarmUpPolicy

WARM_UP_S = 60.0


@dataclass(frozen=True)
class FakeHost:
    """What the driver's round-robin policy reads of a host."""

    address: str
    datacenter: str = "datacenter1"
    rack: str = "rack1"
    is_up: bool = True


A, B, C = FakeHost("127.0.0.7"), FakeHost("127.0.0.8"), FakeHost("127.0.0.9")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def policy_over(hosts: list[FakeHost], clock: Callable[[], float]) -> WarmUpPolicy:
    """The store's policy around the driver's round-robin over `hosts`, as connected (populated, all up)."""
    policy = WarmUpPolicy(DCAwareRoundRobinPolicy(local_dc="datacenter1"), WARM_UP_S, clock)
    policy.populate(None, hosts)
    return policy


def first_coordinators(policy: WarmUpPolicy, plans: int = 30) -> list[Any]:
    return [next(iter(policy.make_query_plan("tickwheel", None))) for _ in range(plans)]


def test_a_node_back_up_coordinates_last_until_its_warm_up_is_over() -> None:
    clock = Clock()
    policy = policy_over([A, B, C], clock)
    assert set(first_coordinators(policy)) == {A, B, C}  # round robin: each first in turn
    policy.on_down(B)
    policy.on_up(B)
    plans = [list(policy.make_query_plan("tickwheel", None)) for _ in range(30)]
    assert all(plan[-1] == B and sorted(plan[:2], key=str) == [A, C] for plan in plans)  # still in every plan, last
    clock.now += WARM_UP_S - 1
    assert B not in first_coordinators(policy)
    clock.now += 1
    assert B in first_coordinators(policy)
    assert policy.warming() == set()


def test_a_node_added_warms_up_and_a_node_gone_is_forgotten() -> None:
    clock = Clock()
    policy = policy_over([A, B], clock)
    policy.on_add(C)
    assert C not in first_coordinators(policy) and policy.warming() == {C}
    policy.on_remove(C)
    assert policy.warming() == set()


def test_a_node_that_let_a_request_time_out_coordinates_last_for_the_warm_up() -> None:
    clock = Clock()
    policy = policy_over([A, B, C], clock)
    policy.unanswered(A)
    policy.unanswered(None)  # a request that timed out before any host was asked
    assert A not in first_coordinators(policy)
    clock.now += WARM_UP_S
    assert A in first_coordinators(policy)


def test_the_hosts_known_at_connect_and_a_whole_cluster_back_at_once_keep_the_wrapped_order() -> None:
    clock = Clock()
    policy = WarmUpPolicy(DCAwareRoundRobinPolicy(local_dc="datacenter1"), WARM_UP_S, clock)
    policy.on_add(A)  # the connect's own discovery of its peers, before populate
    policy.populate(None, [A, B, C])
    assert policy.warming() == set()
    for host in (A, B, C):
        policy.on_up(host)
    assert set(first_coordinators(policy)) == {A, B, C}


def test_a_warm_up_of_zero_changes_nothing() -> None:
    policy = WarmUpPolicy(DCAwareRoundRobinPolicy(local_dc="datacenter1"), 0.0, Clock())
    policy.populate(None, [A, B, C])
    policy.on_up(B)
    assert policy.warming() == set() and B in first_coordinators(policy)


class TimedOutFuture:
    """A driver future whose coordinator never answered: the driver's own timeout, naming the host it asked."""

    def __init__(self, host: FakeHost) -> None:
        self.host = host

    def add_callbacks(self, callback: object, errback: Callable[[BaseException], None]) -> None:
        errback(OperationTimedOut({str(self.host): "Client request timeout"}, self.host))


async def test_the_store_tells_the_policy_which_host_let_a_request_time_out() -> None:
    """Run 8 of the soak: a restarted node timed out the GETs and POSTs it coordinated; the next statements
    (an LWT's SERIAL read and its next send among them) must not start on it again."""
    clock = Clock()
    policy = policy_over([A, B, C], clock)
    store = CassandraStore(CassandraSettings(hosts=("127.0.0.7",)), cast(Any, None), cast(Any, None), policy)
    with pytest.raises(Unavailable):
        await store._answer(cast(ResponseFuture, TimedOutFuture(B)))
    assert policy.warming() == {B}
    assert B not in first_coordinators(policy)


def plan_of(policy: WarmUpPolicy) -> Iterator[Any]:
    return iter(policy.make_query_plan("tickwheel", None))


def test_the_plan_is_read_lazily_so_a_retry_takes_the_next_host_of_the_same_plan() -> None:
    """The driver keeps the plan's iterator: a retry on the next host (RetryIdempotent) and a speculative execution
    continue it, so the host warming up comes after every other one there too."""
    clock = Clock()
    policy = policy_over([A, B, C], clock)
    policy.on_up(A)
    plan = plan_of(policy)
    first, second = next(plan), next(plan)
    assert {first, second} == {B, C} and next(plan) == A
