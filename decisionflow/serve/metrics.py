"""What `GET /metrics` reports, in the Prometheus text format (prometheus_client, one registry per app).

Besides the server's own metrics, the registry carries prometheus_client's process collector
(`process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_open_fds`, ...), its Python
platform collector (`python_info`) and its garbage-collector collector (`python_gc_*`).
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
STOP_PHASES = ("convert", "compile", "admit", "prefix", "prior", "pass")
"""Where work nobody waits for stops: a request's steps on the helper threads, then the model thread's."""
_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

__all__ = ["CONTENT_TYPE", "Metrics"]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.requests = Counter(
            "decisionflow_requests", "HTTP requests answered, by route and status.", ["route", "status"], registry=self.registry
        )
        self.errors = Counter(
            "decisionflow_errors", "Requests answered with an error (4xx or 5xx), by route, status and error type.",
            ["route", "status", "type"], registry=self.registry,
        )
        self.request_seconds = Histogram(
            "decisionflow_request_seconds", "Time from a request's arrival to its answer.", ["route"],
            buckets=_SECONDS, registry=self.registry,
        )
        self.in_flight = Gauge("decisionflow_requests_in_flight", "Requests being answered now.", registry=self.registry)
        self.queue_depth = Gauge("decisionflow_queue_depth", "Inputs waiting for the model.", registry=self.registry)
        self.queue_wait_seconds = Histogram(
            "decisionflow_queue_wait_seconds", "Time an input waited in the queue before its model call began.",
            buckets=_SECONDS, registry=self.registry,
        )
        self.batch_size = Histogram(
            "decisionflow_batch_size", "Inputs decided together in one model call.", buckets=_SIZES, registry=self.registry
        )
        self.batch_tokens = Histogram(
            "decisionflow_batch_tokens", "New tokens (inputs and rows) of one model call.",
            buckets=(64, 128, 256, 512, 1024, 2048, 4096, 8192), registry=self.registry,
        )
        self.pass_seconds = Histogram(
            "decisionflow_pass_seconds", "Time of one model call (its forward passes).", buckets=_SECONDS, registry=self.registry
        )
        self.rejected = Counter(
            "decisionflow_rejected", "Refusals by reason: inputs over a full queue (queue_full), requests past their deadline "
            "(timeout), new question sets over a client's budget (question_set_budget).", ["reason"], registry=self.registry
        )
        self.cancelled = Counter(
            "decisionflow_cancelled", "Inputs dropped before their answer: the client went away or the request timed out.",
            registry=self.registry,
        )
        self.stopped = Counter(
            "decisionflow_stopped", "Work stopped because no request waited for it any more (its client left or its "
            "deadline passed), by the step it stopped before: convert, compile, admit (a request's own steps on the "
            "helper threads), prefix, prior, pass (the model thread's prefix prefill, content-free reading, forward pass).",
            ["phase"], registry=self.registry,
        )
        for phase in STOP_PHASES:
            self.stopped.labels(phase=phase)
        self.question_sets = Counter(
            "decisionflow_question_set_cache", "Question sets (/v1/systemone and /v1/decisions questions, "
            "/v1/chat/completions schemas) looked up in the built-rubric cache, by result.",
            ["result"], registry=self.registry,
        )
        for result in ("hit", "miss"):
            self.question_sets.labels(result=result)
        self.preparations = Counter(
            "decisionflow_question_set_preparations", "New question sets admitted for preparation "
            "(compile, prefix prefill, content-free reading), within the clients' budgets.", registry=self.registry,
        )

    def watch_prepared(self, prepared: Any) -> None:
        """Report the engine's prepared-rubric cache (`runtime.prepared.PreparedRubrics`) at every scrape."""
        self.registry.register(_PreparedCollector(prepared))

    def watch_adapted(self, caches: Mapping[str, Any]) -> None:
        """Report each adapted engine's prepared-rubric cache (`serve.engines.RouteEngines.adapted_caches`), labelled
        by its adapter, in families of their own: the server engine's series keep their names and labels."""
        if caches:
            self.registry.register(_AdaptedCollector(dict(caches)))

    def render(self) -> bytes:
        return generate_latest(self.registry)


CACHE_EVENTS = ("hits", "prepared", "prefixes_prefilled", "prefixes_loaded", "evicted")
"""The prepared-rubric cache's counts (`runtime.prepared.PreparedRubrics.counts`) each cache metric reports."""


class _PreparedCollector(Collector):
    """The engine's prepared-rubric cache as metrics, read when scraped (the cache keeps the counts)."""

    def __init__(self, prepared: Any) -> None:
        self.prepared = prepared

    def collect(self) -> Iterator[Any]:
        counts = self.prepared.counts
        events = CounterMetricFamily(
            "decisionflow_prepared_rubric_events", "The engine's prepared-rubric cache: hits, rubrics prepared "
            "(compiled), prefixes prefilled or loaded from disk, and evictions.", labels=["event"],
        )
        for event in CACHE_EVENTS:
            events.add_metric([event], getattr(counts, event))
        yield events
        yield GaugeMetricFamily("decisionflow_prepared_rubrics", "Rubrics the engine holds prepared.", value=len(self.prepared))
        yield GaugeMetricFamily("decisionflow_prepared_prefix_bytes", "Bytes of the prefix KV caches the engine holds.",
                                value=self.prepared.prefix_bytes)
        yield GaugeMetricFamily("decisionflow_prepared_head_bytes", "Deprecated: decisionflow_prepared_prefix_bytes "
                                "under its earlier name.", value=self.prepared.prefix_bytes)


class _AdaptedCollector(Collector):
    """The adapted engines' prepared-rubric caches, one series per adapter, read when scraped."""

    def __init__(self, caches: dict[str, Any]) -> None:
        self.caches = caches

    def collect(self) -> Iterator[Any]:
        events = CounterMetricFamily(
            "decisionflow_adapted_prepared_rubric_events", "Each adapted engine's prepared-rubric cache (a served "
            "rubric's tuned adapter): hits, rubrics prepared, prefixes prefilled or loaded, evictions.",
            labels=["adapter", "event"],
        )
        rubrics = GaugeMetricFamily("decisionflow_adapted_prepared_rubrics", "Rubrics each adapted engine holds prepared.",
                                    labels=["adapter"])
        prefix_bytes = GaugeMetricFamily("decisionflow_adapted_prepared_prefix_bytes", "Bytes of the prefix KV caches "
                                         "each adapted engine holds.", labels=["adapter"])
        for name, prepared in self.caches.items():
            counts = prepared.counts
            for event in CACHE_EVENTS:
                events.add_metric([name, event], getattr(counts, event))
            rubrics.add_metric([name], len(prepared))
            prefix_bytes.add_metric([name], prepared.prefix_bytes)
        yield events
        yield rubrics
        yield prefix_bytes
