"""The ZooKeeper client's reconnection: forever, and never more than `reconnect_max_s` between two rounds."""

from __future__ import annotations

from kazoo.retry import ForceRetryError

from tickwheel.coordination.zookeeper import reconnect_policy
from tickwheel.settings import ZooKeeperSettings


def test_a_client_that_cannot_reach_any_server_for_a_long_time_keeps_trying_at_least_every_reconnect_max_s() -> None:
    settings = ZooKeeperSettings(reconnect_max_s=1.0)
    policy = reconnect_policy(settings)
    sleeps: list[float] = []
    policy.sleep_func = sleeps.append
    rounds = 0

    def connect_round() -> str:
        nonlocal rounds
        rounds += 1
        if rounds <= 60:  # no server answers for 60 rounds: a quorum lost for about a minute
            raise ForceRetryError("Reconnecting")
        return "connected"

    assert policy(connect_round) == "connected"
    assert len(sleeps) == 60
    # kazoo's default doubles the wait up to an hour: after 30 s without quorum the next round came 12-25 s later,
    # when the new leader had expired every session (10 s). The jitter is at most 40 % either way.
    assert max(sleeps) <= 1.4 * settings.reconnect_max_s
    # The first rounds come quickly: 0.1, 0.2, 0.4 s before jitter (kazoo doubles the jittered wait, so the
    # jitter compounds: at most 1.4, 1.4**2, 1.4**3 times those).
    assert sum(sleeps[:3]) <= 0.1 * 1.4 + 0.2 * 1.4**2 + 0.4 * 1.4**3
