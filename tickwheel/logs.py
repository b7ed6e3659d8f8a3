"""JSON-lines logging, configured only by the CLI. Records may carry tenant, job_id, run_id and attempt
through `extra=`; they are emitted as top-level fields."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

CONTEXT_FIELDS = ("tenant", "job_id", "run_id", "attempt", "lane", "shard")


class JsonLines(logging.Formatter):
    def __init__(self, process: str | None = None):
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if self.process:
            line["process"] = self.process
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = str(value)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line)


def configure(level: str = "INFO", process: str | None = None) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines(process))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("cassandra", "kazoo", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # Cassandra 5 warns on every prepared statement of a session bound to a keyspace (`USE`), and on every
    # multi-partition COUNT; both are deliberate here, and one line per query would drown the real warnings.
    logging.getLogger("cassandra.protocol").setLevel(logging.ERROR)
