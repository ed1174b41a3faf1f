"""What a server accepts and how it batches: every limit in one place, each with the reason it exists."""

from __future__ import annotations

from dataclasses import dataclass, field

BODY_BYTES_PER_POSITION = 16
"""The default body limit per position of the model's context: English text runs about 4 bytes per token,
JSON-escaped non-Latin text (`\\uXXXX`, 6 bytes a character) a few times that; a body beyond this holds more
than the model can read."""
MIN_BODY_BYTES = 64 << 10
"""The default body limit never goes below this, however small the context."""
UNKNOWN_CONTEXT_BODY_BYTES = 1 << 20
"""The default body limit of a model that does not say how long its context is."""


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int | None = None
    """A request body larger than this is refused (413) before it is parsed. None: sized to the model's
    context (`body_limit_for`): 16 bytes per position, at least 64 KiB (128 KiB for an 8,192-position model)."""
    max_questions: int = 32
    """Questions per `/v1/systemone` request: each one is a field of the compiled rubric and a row of every pass.
    (`/v1/decisions` takes its own format's 1-400; both are bounded by `max_question_set_row_tokens`.)"""
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
    """Question sets (`/v1/systemone` and `/v1/decisions` questions, `/v1/chat/completions` schemas) kept as built
    rubrics (the engine keeps their compiled form and prefix cache)."""
    max_cached_question_set_bytes: int = 32 << 20
    """...and the bytes of their questions (ids, instructions, criteria) kept across them."""
    new_question_sets_per_minute: float = 30.0
    """New question sets (not yet prepared by the engine) each client may have prepared per minute: each
    costs a compile, a prefix prefill and a content-free reading on the model thread everyone shares. Per
    API key when the server has keys, else for all clients together; beyond it, 429 with `Retry-After`."""
    new_question_set_burst: int = 4
    """New question sets a client may have prepared at once before the per-minute rate applies."""
    max_schema_fields: int = 64
    """Fields a `/v1/chat/completions` schema may ask (a multi-label array asks one per option): each is a row of every pass."""
    max_schema_options: int = 512
    """Answers one property of such a schema may offer: each is listed in the prompt and compiled into the field's trie."""
    max_question_set_prefix_tokens: int = 2048
    """A question set whose prompt (instructions and every question's catalog, before the input) is longer is
    refused before it is cached: its prefix prefill on the shared model thread is what a new set costs most."""
    max_question_set_row_tokens: int = 2048
    """A question set read independently (`/v1/systemone`, `/v1/decisions`) whose rows are longer is refused before
    it is cached. Each question's row carries its text and its allowed answers and is read after the input on
    every request, and on each of the three content-free readings of a new set's first request: the rows are
    what such a set costs (about 1,700 tokens for 28 questions of a few answers each; docs/serving.md,
    "Limits and deadlines", measures a set at the limit)."""
    body_timeout_s: float = 30.0
    """A body not fully received this long after the request began is refused (408) and the connection closed:
    a client sending one byte at a time cannot hold a request open."""
    request_timeout_s: float | None = 60.0
    """A request not answered this long after it arrived is answered 504, and the work done for it stops: its
    inputs leave the queue, its steps on the helper threads end at the next one, and a model call that no
    live request waits for ends at its next checkpoint (a rubric's preparation only once no request waits for
    that rubric). 60 s is several times the slowest request that fits the other limits on the bundled model
    on 2 CPU cores (a new 32-question set's first request; docs/serving.md, "Timeouts"). None: no deadline."""

    @property
    def max_question_set_head_tokens(self) -> int:
        """Deprecated: the earlier name of `max_question_set_prefix_tokens`."""
        return self.max_question_set_prefix_tokens


def body_limit_for(engine: object, limits: Limits) -> int:
    """`limits.max_body_bytes`, or the default sized to `engine`'s context when it is None."""
    if limits.max_body_bytes is not None:
        return limits.max_body_bytes
    positions = int(getattr(getattr(engine, "backend", None), "max_positions", 0) or 0)
    if not positions:
        return UNKNOWN_CONTEXT_BODY_BYTES
    return max(MIN_BODY_BYTES, positions * BODY_BYTES_PER_POSITION)


@dataclass(frozen=True)
class Batching:
    enabled: bool = True
    """Off: every input goes through the model alone (for comparison; never faster under load)."""
    max_wait_ms: float = 5.0
    """How long the first input of an idle model waits for others of the same rubric to join it."""
    token_budget: int = 4096
    """New tokens (inputs and rows) of one model call; further inputs wait for the next call. `create_app`
    gives the engine the same budget (`EngineOptions.max_batch_tokens`), so the call is packed in one pass."""


@dataclass(frozen=True)
class Access:
    api_keys: tuple[str, ...] = ()
    """Bearer tokens accepted in `Authorization`; empty: every route is open."""
    protect_health: bool = False
    """With keys: `/healthz` and `/readyz` need one too (off: probes need no key)."""
    protect_metrics: bool = False
    """With keys: `/metrics` needs one too (off: a scraper needs no key)."""
    docs: bool = False
    """Serve `/docs`, `/redoc` and `/openapi.json` (behind the key, when there are keys)."""
    cors_origins: tuple[str, ...] = ()
    """Origins a browser may call the API from (`*` for any); empty: no CORS headers at all."""


@dataclass(frozen=True)
class ServeSettings:
    limits: Limits = field(default_factory=Limits)
    batching: Batching = field(default_factory=Batching)
    access: Access = field(default_factory=Access)
    served_model_name: str | None = None
    """The model's name in answers and `/v1/models`. None: the loaded model's name, a local path cut to
    its last part (a server never tells clients where its files are)."""
    graceful_shutdown_s: float = 30.0
    """On SIGTERM, how long requests already accepted may take to finish before they are cancelled."""
    limit_concurrency: int | None = 512
    """Open connections and requests uvicorn holds at once; beyond it a new request gets a plain 503 at once."""
    work_threads: int = 2
    """Threads that parse bodies, build question sets and tokenise inputs, so the event loop never does."""
    decisions_refusal_mass: float = 0.0
    """`/v1/decisions`: a question whose candidate mass (the probability, before renormalising, that the model's
    next token begins one of its allowed answers) is below this is answered `{"type": "refusal"}`, the others
    still answered. 0 (the default): every question is answered."""
