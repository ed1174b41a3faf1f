"""Which engine reads a request: the server's, or for a served rubric with a tuned adapter beside it
(`NAME.adapter.safetensors`, from `decisionflow tune`) an engine over the same loaded model with that adapter
merged (`Engine.with_adapter`: the model's weights shared, only the adapted projections copied).

Rubrics tuned apart, and rubrics tuned and not, are served side by side this way: each route's requests run
on its own engine, in passes of their own (an adapter merged into the weights changes every product of a
pass, so rows read under different adapters cannot share one), on the one model thread the micro-batcher
runs every pass on. Rubrics whose files carry the same adapter share one adapted engine. Question sets
(`/v1/decisions`, `/v1/systemone`, chat, inline YAML) are read by the server's engine: an adapter is tuned
for its rubric, not for questions it never saw.

A served rubric is matched by identity (the registry's own rubric object), never by name, so an inline rubric
that borrows a served one's name is not read under its adapter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ModelError

if TYPE_CHECKING:
    from ..runtime.engine import Engine
    from .registry import Registered, RubricRegistry


class RouteEngines:
    def __init__(self, engine: Engine, registry: RubricRegistry) -> None:
        self.engine = engine
        self._by_adapter: dict[str, Engine] = {}
        self._names: dict[str, str] = {}  # adapter fingerprint -> the name /metrics gives it
        self._by_rubric: dict[int, Engine] = {}
        self._served: list[Any] = []  # the rubric objects whose identity keys `_by_rubric`, kept alive with it
        for entry in registry.entries.values():
            if entry.adapter is None:
                continue
            fingerprint = entry.adapter.fingerprint
            if fingerprint not in self._by_adapter:
                try:
                    self._by_adapter[fingerprint] = engine.with_adapter(entry.adapter)
                except ModelError as error:
                    raise ModelError(f"rubric {entry.name!r}: {error}") from None
                path = entry.adapter.path
                self._names[fingerprint] = path.name if path is not None else fingerprint[:12]
            self._by_rubric[id(entry.rubric)] = self._by_adapter[fingerprint]
            self._served.append(entry.rubric)

    def for_target(self, target: Any) -> Engine:
        """The engine that reads `target`: its adapted engine where it is a served rubric with an adapter."""
        return self._by_rubric.get(id(target), self.engine)

    def for_entry(self, entry: Registered) -> Engine:
        return self._by_rubric.get(id(entry.rubric), self.engine)

    def adapted_caches(self) -> dict[str, Any]:
        """Each adapted engine's prepared-rubric cache, by its adapter's file name (the fingerprint's start for an
        adapter given without a file): what `/metrics` reports beside the server engine's own cache."""
        return {self._names[fingerprint]: engine.prepared for fingerprint, engine in self._by_adapter.items()}
