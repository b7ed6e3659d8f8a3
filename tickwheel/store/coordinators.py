"""Which node coordinates a statement: a node that has just come back, or that has just left a request unanswered,
is asked last.

Run 8 of the nemesis soak (BENCHMARKS.md): a Cassandra node restarted at load ~50 answered its first requests
only after minutes; as soon as the driver saw it UP it was the first coordinator of a third of all statements
(token-aware, replicas shuffled; RF 3 on 3 nodes makes every node a replica of everything), and it let them run
into the client's request timeout: 80 API 503s in a minute. Nothing in the driver moves such a node back: the
retry policy is never asked about a request the coordinator did not answer, and a conditional write is not sent
speculatively (it is not idempotent), so it waits the whole `request_timeout_s` on that one node.

`WarmUpPolicy` wraps the driver's policy and moves every host that came UP (or was added) less than `warm_up_s`
ago, or that let a request run into the client timeout less than `warm_up_s` ago (`CassandraStore` reports it),
to the end of each query plan, in the order the wrapped policy gave. The host still takes its share of replica
traffic (the coordinators send it reads and writes as a replica, which is what warms it up), and it is still
tried when every other host failed: when every host is warming up the plan is the wrapped policy's, unchanged
(a single node, or a whole cluster restarted).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from cassandra.policies import LoadBalancingPolicy, WrapperPolicy


class WarmUpPolicy(WrapperPolicy):  # type: ignore[misc]
    """The wrapped policy's plans, with hosts up (or failing) for less than `warm_up_s` moved to their end."""

    def __init__(
        self, child_policy: LoadBalancingPolicy, warm_up_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(child_policy)
        self.warm_up_s = warm_up_s
        self._clock = clock
        # host -> since when it warms up; replaced whole on each change, under the lock (plans read it unlocked)
        self._since: dict[Any, float] = {}
        self._changing = threading.Lock()
        self._populated = False

    def populate(self, cluster: Any, hosts: Any) -> None:
        """The hosts known at connect time are not warming up; events before this are the connect's own."""
        super().populate(cluster, hosts)
        self._populated = True

    def check_supported(self) -> None:
        """What the wrapped policy needs of the cluster (token awareness: the partitioner's C extension)."""
        self._child_policy.check_supported()

    def on_up(self, host: Any) -> None:
        """A host back up warms up from now."""
        self._warm(host)
        super().on_up(host)

    def on_add(self, host: Any) -> None:
        """A host added to the cluster warms up from now."""
        self._warm(host)
        super().on_add(host)

    def on_down(self, host: Any) -> None:
        """A host down is in no plan of the wrapped policy."""
        self._forget(host)
        super().on_down(host)

    def on_remove(self, host: Any) -> None:
        """A host removed is in no plan of the wrapped policy."""
        self._forget(host)
        super().on_remove(host)

    def unanswered(self, host: Any) -> None:
        """`host` let a request run into the client's timeout: asked last again for `warm_up_s`."""
        if host is not None:
            self._warm(host)

    def warming(self) -> set[Any]:
        """The hosts asked last now."""
        now = self._clock()
        return {host for host, since in self._since.items() if now - since < self.warm_up_s}

    def make_query_plan(self, working_keyspace: Any = None, query: Any = None) -> Iterator[Any]:
        """The wrapped policy's plan, the hosts warming up held back to its end."""
        plan = self._child_policy.make_query_plan(working_keyspace, query)
        if not self._since:
            yield from plan
            return
        warming = self.warming()
        if len(warming) < len(self._since):
            self._prune()
        held = []
        for host in plan:
            if host in warming:
                held.append(host)
            else:
                yield host
        yield from held

    def _warm(self, host: Any) -> None:
        if self._populated and self.warm_up_s > 0:
            with self._changing:
                self._since = {**self._since, host: self._clock()}

    def _forget(self, host: Any) -> None:
        with self._changing:
            self._since = {h: since for h, since in self._since.items() if h != host}

    def _prune(self) -> None:
        """Drop the hosts warm again (once none is left, plans are the wrapped policy's at no cost)."""
        with self._changing:
            now = self._clock()
            self._since = {h: since for h, since in self._since.items() if now - since < self.warm_up_s}
