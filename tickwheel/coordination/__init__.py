"""Coordination: ZooKeeper bridged to asyncio (zookeeper.py), for shard ownership, membership and leadership."""
