"""What new `/v1/systemone` question sets may cost: a budget of preparations per client.

A question set the engine has not prepared costs far more than a request: it is compiled, its prefix
(up to `max_question_set_prefix_tokens` tokens) is prefilled on the one model thread everyone shares,
and its content-free prior is read. Changing one character of an instruction makes a new set, so
without a budget one client could keep the model busy preparing and push every served rubric out of
the caches. Each client (each API key; every client together when the server has no keys) has a
token bucket: `burst` preparations at once, refilled at `per_minute`. A request that would prepare a
set beyond it is answered 429 with `Retry-After`, before the set is compiled, prefilled or cached.
Requests for sets the engine still holds prepared are never charged.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Callable

ANONYMOUS = "all clients"
"""The one bucket of a server without API keys."""


@dataclass
class _Bucket:
    tokens: float
    updated: float


class PreparationBudget:
    """Token buckets of new question-set preparations, one per client; safe from several threads."""

    def __init__(self, per_minute: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = per_minute / 60.0
        self.burst = max(1, burst)
        self.clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def charge(self, client: str) -> float | None:
        """Take one preparation from `client`'s bucket: None when it had one, else the seconds until it will."""
        now = self.clock()
        with self._lock:
            bucket = self._buckets.get(client)
            if bucket is None:
                bucket = self._buckets[client] = _Bucket(float(self.burst), now)
            bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.updated) * self.rate)
            bucket.updated = now
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return None
            if self.rate <= 0:
                return math.inf
            return (1.0 - bucket.tokens) / self.rate
