"""Decisions over HTTP: a FastAPI app on uvicorn, one model, micro-batched requests.

`create_app(engine)` builds the app (`/v1/systemone`, `/v1/rubrics/{name}/decide`, `/v1/rubrics`,
`/v1/models`, `/healthz`, `/readyz`, `/metrics`); `decisionflow serve` loads the model and runs it. FastAPI, uvicorn and
prometheus_client are the optional extra `decisionflow[serve]`.
"""

from .app import create_app
from .registry import RubricRegistry
from .settings import Access, Batching, Limits, ServeSettings

__all__ = ["Access", "Batching", "Limits", "RubricRegistry", "ServeSettings", "create_app"]
