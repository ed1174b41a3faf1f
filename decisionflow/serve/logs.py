"""The server's log: the logger `decisionflow.serve`, one JSON object a line.

Every request is one `INFO` line (`"message": "request"`) with its id, method, route, rubric, status,
time, queue wait and model time; a request that failed on the server's side adds an `ERROR` line
(`"message": "request failed"`) with the same id and the traceback as one JSON string. Nothing of the
traceback is ever sent to the client: the client gets the request id (`X-Request-ID`) to quote.

`decisionflow serve` (and `server.server_for`) installs the handler with uvicorn's own logging; an app
run by another server logs through whatever handlers the process gives `decisionflow.serve`.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from typing import Any

from uvicorn.config import LOG_LEVELS

LOGGER_NAME = "decisionflow.serve"
log = logging.getLogger(LOGGER_NAME)


class JsonLines(logging.Formatter):
    """A record as one JSON object: time, level, logger, message, the record's `fields`, and `traceback`."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(getattr(record, "fields", None) or {})
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=True, default=str)  # ASCII: a log line is never a broken byte string


def log_config(level: str, base: dict[str, Any]) -> dict[str, Any]:
    """uvicorn's logging configuration `base` with `decisionflow.serve` added at `level`, written to stderr."""
    config = copy.deepcopy(base)
    config.setdefault("formatters", {})["decisionflow_json"] = {"()": f"{__name__}.JsonLines"}
    config.setdefault("handlers", {})["decisionflow_json"] = {
        "formatter": "decisionflow_json", "class": "logging.StreamHandler", "stream": "ext://sys.stderr",
    }
    config.setdefault("loggers", {})[LOGGER_NAME] = {
        "handlers": ["decisionflow_json"], "level": LOG_LEVELS[level.lower()], "propagate": False,
    }
    return config
