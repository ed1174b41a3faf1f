"""What a server has built from requests (question sets, schemas read into rubrics), kept by content.

The least recently used go first beyond a count and a byte budget (the UTF-8 bytes of their keys, which
hold everything a client sent to define them). Safe to use from several threads (requests are parsed on
a small pool). Something is added only once it was accepted (built, compiled, within the limits): a
refused question set never pushes a good one out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any


class RecentlyBuilt:
    def __init__(self, capacity: int, max_bytes: int) -> None:
        self.capacity = capacity
        self.max_bytes = max_bytes
        self._built: OrderedDict[str, Any] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._built)

    def find(self, key: str) -> Any | None:
        with self._lock:
            found = self._built.get(key)
            if found is not None:
                self._built.move_to_end(key)
            return found

    def add(self, key: str, built: Any) -> None:
        with self._lock:
            if key in self._built:
                return
            self._built[key] = built
            self._bytes += _size(key)
            while len(self._built) > 1 and (len(self._built) > self.capacity or self._bytes > self.max_bytes):
                dropped, _ = self._built.popitem(last=False)
                self._bytes -= _size(dropped)


def _size(key: str) -> int:
    return len(key.encode("utf-8", errors="surrogatepass"))
