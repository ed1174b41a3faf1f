"""Decisions over HTTP: a FastAPI app on uvicorn, one model, micro-batched requests.

`create_app(engine)` builds the app (`/v1/chat/completions`, `/v1/decisions`, `/v1/systemone`,
`/v1/rubrics/{name}/decide`, `/v1/rubrics/decide`, `/v1/rubrics`, `/v1/models`, `/healthz`, `/readyz`, `/metrics`, and
the playground page at `/`); `decisionflow serve` loads the model and runs it. One module per wire format
(`openai_chat`, `decisions`, `systemone`, `rubrics`, `inline`), the static page (`page`), the
path every request takes through limits, budgets and the micro-batcher (`admission`), and the app that wires
them (`app`). FastAPI, uvicorn and prometheus_client are the optional extra `decisionflow[serve]`.
"""

from typing import Any

from .settings import Access, Batching, Limits, ServeSettings

__all__ = ["Access", "Batching", "Limits", "RubricRegistry", "ServeSettings", "create_app"]


def __getattr__(name: str) -> Any:
    # The settings are plain dataclasses that the command line reads its defaults from; the app (FastAPI)
    # and the registry (the engine's modules) load only when asked for.
    if name == "create_app":
        from .app import create_app

        return create_app
    if name == "RubricRegistry":
        from .registry import RubricRegistry

        return RubricRegistry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
