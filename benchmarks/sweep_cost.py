"""The coordinator sweeper's pass alone (or the reconciler's: `--of reconciler`): client CPU, Cassandra CPU,
statements and wall time per pass over a keyspace of settled once jobs (and some that are not settled), for two
codes side by side (each run with its code on PYTHONPATH, over the same keyspace). Nothing else runs: no platform,
no Kafka (repairs announce to a bus in memory).

    python -m benchmarks.sweep_cost populate --cassandra 127.0.0.4:29042 --keyspace tw_sweep --settled 6000
    python -m benchmarks.sweep_cost passes --cassandra 127.0.0.4:29042 --keyspace tw_sweep --pid <cassandra pid> \
        --passes 3 --start-min 0 --at <populated_at>

`populate` writes (with this code's store) once jobs due over the last `--spread-min` minutes (0: all in the
minute three minutes ago), each claimed and SUCCEEDED; `--waiting` once jobs due in one to three hours;
`--running` once jobs due in the last half hour, RUNNING under a lease three hours long; `--recurring` hourly
interval jobs whose next run is due in one to three hours (with `--recurring-since-h H`: made H hours ago, each
hourly occurrence since recorded as a run, so the reconciler has a window of H occurrences to compare per job and
finds nothing missing).
None needs a repair, so every pass of either code finds the same keyspace. `passes` makes one warm pass and then
`--passes` timed ones, each at a clock one minute later than the last (from `--start-min` minutes after `--at`,
the `populated_at` that `populate` printed): a sweeper that reads the minutes since its last pass reads one minute
a pass, as it does every `sweep_interval_s` (60 s) in service, without waiting a minute between passes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
from datetime import UTC, datetime, timedelta

from benchmarks.peers.harness import cpu_seconds
from coordinator.reconciler import Reconciler
from coordinator.sweeper import Sweeper
from tests.factories import definition, job
from tickwheel import metrics
from tickwheel.bus.memory import MemoryBus
from tickwheel.bus.near import NearAnnouncer
from tickwheel.core.horizon import RUN_RETENTION_S
from tickwheel.core.instants import whole_ms
from tickwheel.core.reconcile import Verdict
from tickwheel.settings import CassandraSettings, Settings
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.jobs import run_of
from tickwheel.store.migrate import migrate
from tickwheel.store.records import AttemptResult, RunStatus
from tickwheel.store.tables import CassandraTables

IN_FLIGHT = 64


async def populate(tables: CassandraTables, args: argparse.Namespace, now: datetime) -> dict[str, object]:
    """The keyspace's jobs (see the module's text); returns how many of each."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def once(due: datetime, made_at: datetime, state: str) -> None:
        made, run = job(due, job_definition=definition(every_s=None, anchor=due))
        async with gate:
            await tables.create_job(made, run, made_at)
            if state == "waiting":
                return
            lease = due + timedelta(hours=3) if state == "running" else due + timedelta(minutes=1)
            assert (await tables.claim(run, 0, "bench", lease, due)).applied
            if state == "settled":
                result = AttemptResult(RunStatus.SUCCEEDED, response_code=200)
                assert await tables.finish(run, 1, result, "bench", due, due + timedelta(seconds=1), lease)

    async def recurring(due: datetime) -> None:
        since = timedelta(hours=args.recurring_since_h)
        made, run = job(due, job_definition=definition(every_s=3600, anchor=due - since - timedelta(hours=3)))
        async with gate:
            await tables.create_job(made, run, now - since)
            at = due - timedelta(hours=1)
            while at > now - since:  # the occurrences since it was made, each with its run
                await tables.create_run(run_of(made, at, retention_s=RUN_RETENTION_S), now - since)
                at -= timedelta(hours=1)

    spread_s = args.spread_min * 60

    def settled_at() -> datetime:
        if not spread_s:  # all in one minute, three minutes ago: what one pass reads at a steady rate
            return (
                now.replace(second=0, microsecond=0) - timedelta(minutes=3) + timedelta(seconds=random.uniform(0, 59))
            )
        return now - timedelta(seconds=random.uniform(60, spread_s))

    tasks = [
        *(once(settled_at(), now - timedelta(seconds=spread_s + 3600), "settled") for _ in range(args.settled)),
        *(once(now + timedelta(seconds=random.uniform(3600, 3 * 3600)), now, "waiting") for _ in range(args.waiting)),
        *(once(now - timedelta(seconds=random.uniform(60, 1800)), now - timedelta(hours=1), "running")
          for _ in range(args.running)),
        *(recurring(now + timedelta(seconds=random.uniform(3600, 3 * 3600))) for _ in range(args.recurring)),
    ]  # fmt: skip
    await asyncio.gather(*tasks)
    return {
        "populated_at": now.isoformat(),
        "settled": args.settled,
        "waiting": args.waiting,
        "running": args.running,
        "recurring": args.recurring,
        "recurring_since_h": args.recurring_since_h,
    }


def statements() -> float:
    """CQL requests this process has sent so far (`tickwheel_cql_statements_total`, every kind)."""
    return sum(s.value for m in metrics.cql_statements.collect() for s in m.samples if s.name.endswith("_total"))


async def timed(sweeper: Sweeper | Reconciled, now: datetime, server: int) -> dict[str, object]:
    """One pass at the clock `now`: what it cost this process and the server, and what it repaired."""
    me = os.getpid()
    t0, c0, s0, q0 = time.monotonic(), cpu_seconds([me]), cpu_seconds([server]), statements()
    repairs = await sweeper.sweep(now)
    t1, c1, s1, q1 = time.monotonic(), cpu_seconds([me]), cpu_seconds([server]), statements()
    return {
        "client_s": round(c1 - c0, 3),
        "cassandra_s": round(s1 - s0, 3),
        "wall_s": round(t1 - t0, 3),
        "statements": int(q1 - q0),
        "repairs": {r.value: k for r, k in repairs.items()},
    }


async def passes(tables: CassandraTables, args: argparse.Namespace) -> dict[str, object]:
    """The server's idle CPU, then one warm pass and `args.passes` timed ones, a minute of the clock apart."""
    s0 = cpu_seconds([args.pid])
    await asyncio.sleep(args.idle)
    idle = (cpu_seconds([args.pid]) - s0) / args.idle
    start = datetime.fromisoformat(args.at) + timedelta(minutes=args.start_min)
    settings = Settings()
    if args.of == "reconciler":
        pass_of: Sweeper | Reconciled = Reconciled(Reconciler(settings, tables, NearAnnouncer(settings, MemoryBus())))
    else:
        pass_of = Sweeper(settings, tables, MemoryBus())
    if args.first_pass:  # the keyspace as before migration 0008's index was filled: the warm pass is a first pass
        await tables.cql.execute_raw("TRUNCATE jobs_recurring")
        await tables.cql.execute_raw("DELETE FROM sweep_marks WHERE name = 'sweeper'")
    warm = await timed(pass_of, start, args.pid)
    runs = [await timed(pass_of, start + timedelta(minutes=n), args.pid) for n in range(1, args.passes + 1)]
    return {"of": args.of, "label": args.label, "cassandra_idle_s_per_s": round(idle, 4), "warm": warm, "passes": runs}


class Reconciled:
    """A reconciler's pass as `timed` runs a sweeper's (its findings counted as repairs)."""

    def __init__(self, reconciler: Reconciler) -> None:
        self.reconciler = reconciler

    async def sweep(self, now: datetime) -> dict[Verdict, int]:
        return await self.reconciler.reconcile(now)


async def main_async(args: argparse.Namespace) -> dict[str, object]:
    settings = CassandraSettings(hosts=(args.cassandra,), keyspace=args.keyspace)
    if args.command == "populate":
        await migrate(settings)
    store = await CassandraStore.connect(settings)
    try:
        tables = CassandraTables(store)
        if args.command == "populate":
            done = await populate(tables, args, whole_ms(datetime.now(UTC)))
        else:
            done = await passes(tables, args)
    finally:
        await store.close()
    return {"when": datetime.now(UTC).isoformat(timespec="seconds"), **done, "loadavg": os.getloadavg()}


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("command", choices=["populate", "passes"])
    p.add_argument("--cassandra", required=True, help="host:port")
    p.add_argument("--keyspace", default="tw_sweep_cost")
    p.add_argument("--pid", type=int, default=0, help="the Cassandra server's pid (passes: its CPU from /proc)")
    p.add_argument("--settled", type=int, default=6000)
    p.add_argument("--waiting", type=int, default=200)
    p.add_argument("--running", type=int, default=100)
    p.add_argument("--recurring", type=int, default=100)
    p.add_argument("--recurring-since-h", type=int, default=0, help="populate: recurring jobs made this long ago")
    p.add_argument("--spread-min", type=int, default=120)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--start-min", type=int, default=0)
    p.add_argument("--at", default="", help="passes: the populated_at that `populate` printed")
    p.add_argument("--idle", type=float, default=5.0, help="passes: seconds of the server's idle CPU measured first")
    p.add_argument("--label", default="", help="passes: a name for the output (the code's side)")
    p.add_argument("--of", choices=["sweeper", "reconciler"], default="sweeper", help="passes: whose pass")
    p.add_argument("--first-pass", action="store_true", help="passes: empty the index and the mark first")
    args = p.parse_args()
    print(json.dumps(asyncio.run(main_async(args))))


if __name__ == "__main__":
    main()
