"""Flow control shared by every worker: the Redis adapter (redis.py) and the limits and breakers in it (limits.py)."""
