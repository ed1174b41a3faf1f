"""What a server accepts and how it batches: every limit in one place, each with the reason it exists."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 1 << 20
    """A request body larger than this is refused (413) before it is parsed."""
    max_questions: int = 32
    """Questions per `/v1/systemone` request: each one is a field of the compiled rubric and a row of every pass."""
    max_options: int = 64
    """Labels per `choice` question: each one is listed in the prompt and compiled into the field's trie."""
    max_texts: int = 64
    """Inputs per `/v1/rubrics/{name}/decide` request with `texts` (and never more than `max_queue`)."""
    max_queue: int = 256
    """Inputs waiting for the model; beyond this a request is answered 503 with `Retry-After`. A `texts`
    request of more inputs than this could never be admitted, so it is refused (400) instead, like one
    over `max_texts`; `decisionflow serve` refuses `--max-queue` below `--max-texts` at startup."""
    retry_after_s: int = 1
    """What a 503 for a full queue tells the client to wait before trying again."""
    max_cached_question_sets: int = 256
    """`/v1/systemone` question sets kept as built rubrics (the engine keeps their compiled form and head cache)."""


@dataclass(frozen=True)
class Batching:
    enabled: bool = True
    """Off: every input goes through the model alone (for comparison; never faster under load)."""
    max_wait_ms: float = 5.0
    """How long the first input of an idle model waits for others of the same rubric to join it."""
    token_budget: int = 4096
    """New tokens (inputs and rows) of one model call; further inputs wait for the next call."""


@dataclass(frozen=True)
class ServeSettings:
    limits: Limits = field(default_factory=Limits)
    batching: Batching = field(default_factory=Batching)
    graceful_shutdown_s: float = 30.0
    """On SIGTERM, how long requests already accepted may take to finish before they are cancelled."""
