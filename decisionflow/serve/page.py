"""The playground: a static page at `GET /` that decides with the server's own routes, from a browser.

The page (`playground/index.html`), its script and its style ship inside the package and are served as
they are: no build step, nothing fetched from elsewhere, so it works offline. The script calls only
`GET /v1/rubrics`, `POST /v1/rubrics/{name}/decide`, `POST /v1/rubrics/decide` (a YAML rubric sent
inline, see `inline`) and the routes of `workbench` (a rubric checked and planned as it is typed, a served rubric's
YAML, the rubric written in other forms, coherence checks, an evaluation on labelled rows), with the API key the person types sent as `Authorization: Bearer` and kept in the
page's memory only. The page's own paths are open even when the server has keys (they hold no data);
every call the page makes asks for the key as any client's does.

Every answer of these paths carries a Content-Security-Policy that lets the page run its own script and
style only, and connect to this origin only: text that reaches the page from a server answer or from
what a person typed is written as text (`textContent`), and could not run as a script if it were not.
"""

from __future__ import annotations

from importlib import resources
from typing import Awaitable, Callable

from fastapi import FastAPI
from fastapi.responses import Response

ASSETS = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/playground/playground.js": ("playground.js", "text/javascript; charset=utf-8"),
    "/playground/playground.css": ("playground.css", "text/css; charset=utf-8"),
}
"""Each path of the page, the file it answers (in `decisionflow/serve/playground/`) and its content type."""
PAGE_PATHS = frozenset(ASSETS)
"""Paths served without an API key (`app` leaves them open): the page and its assets, nothing else."""
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def asset_bytes(name: str) -> bytes:
    """One file of the page, read from the installed package."""
    return resources.files(__package__).joinpath("playground", name).read_bytes()


def add_page(app: FastAPI) -> None:
    """Serve the page and its assets on `app` (`GET` each path of `ASSETS`); read once, when the app is made."""
    for path, (name, media_type) in ASSETS.items():
        app.add_api_route(path, _answering(asset_bytes(name), media_type), methods=["GET"], include_in_schema=False,
                          name=f"playground:{name}")


def _answering(body: bytes, media_type: str) -> Callable[[], Awaitable[Response]]:
    """An endpoint answering `body` (FastAPI calls it without arguments)."""

    async def answer() -> Response:
        return Response(body, media_type=media_type, headers=SECURITY_HEADERS)

    return answer
