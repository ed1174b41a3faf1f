"""The playground page over HTTP: `GET /` and its assets with their content types and security headers, open
when the server has API keys (the API routes the page calls still ask for the key), shipped in the wheel,
calling only routes the app has; and its script writing server and user text as text only."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
from serve_client import stand_in_engine  # noqa: E402

from decisionflow.serve import Access, ServeSettings, create_app  # noqa: E402
from decisionflow.serve.page import ASSETS, PAGE_PATHS  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "decisionflow" / "serve" / "playground"
KEY = "playground-key-5c1e"


def client_for(settings: ServeSettings | None = None) -> TestClient:
    return TestClient(create_app(stand_in_engine(), settings=settings))


@pytest.fixture(scope="module")
def open_client() -> TestClient:
    return client_for()


@pytest.fixture(scope="module")
def keyed_client() -> TestClient:
    return client_for(ServeSettings(access=Access(api_keys=(KEY,))))


def test_the_page_and_its_assets_are_served_with_their_content_types(open_client):
    expected = {"/": "text/html; charset=utf-8", "/playground/playground.js": "text/javascript; charset=utf-8",
                "/playground/playground.css": "text/css; charset=utf-8"}
    assert set(expected) == PAGE_PATHS
    for path, media_type in expected.items():
        reply = open_client.get(path)
        assert reply.status_code == 200, path
        assert reply.headers["content-type"] == media_type
        assert reply.content == (PAGE / ASSETS[path][0]).read_bytes()
        policy = reply.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "default-src 'none'" in policy and "connect-src 'self'" in policy
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert reply.headers["referrer-policy"] == "no-referrer"
    page = open_client.get("/").text
    assert '<script src="/playground/playground.js" defer></script>' in page
    assert '<link rel="stylesheet" href="/playground/playground.css">' in page


def test_no_other_path_under_the_page_is_served(open_client):
    for path in ("/playground/", "/playground/index.html", "/playground/../app.py", "/playground/playground.js.map",
                 "/index.html"):
        reply = open_client.get(path)
        assert reply.status_code == 404, path
        assert reply.json()["error"]["type"] == "NotFound"


def test_with_api_keys_the_page_loads_and_the_routes_it_calls_ask_for_the_key(keyed_client):
    for path in PAGE_PATHS:
        assert keyed_client.get(path).status_code == 200, path
    assert keyed_client.get("/v1/rubrics").status_code == 401
    reply = keyed_client.post("/v1/rubrics/decide", json={"rubric": "name: x", "text": "hello"})
    assert reply.status_code == 401 and reply.json()["error"]["field"] == "authorization"
    assert keyed_client.post("/v1/rubrics/sentiment/decide", json={"text": "hello"}).status_code == 401
    listed = keyed_client.get("/v1/rubrics", headers={"Authorization": f"Bearer {KEY}"})
    assert listed.status_code == 200 and "support_triage" in [entry["name"] for entry in listed.json()["rubrics"]]
    assert KEY not in keyed_client.get("/").text


def script() -> str:
    return (PAGE / "playground.js").read_text(encoding="utf-8")


def test_the_script_never_parses_text_as_html():
    code = script()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "createContextualFragment",
                 "DOMParser", "eval(", "new Function", "setTimeout(\"", "srcdoc", ".src =", ".href ="):
        assert sink not in code, f"playground.js uses {sink}"
    # Attributes are set with fixed names only: never an event handler, never one named by data. The charts' one
    # `setAttribute(key, ...)` takes only the names of a fixed list, checked before it is called.
    for name in re.findall(r"setAttribute\(([^,]+),", code):
        assert re.fullmatch(r'"(aria-[a-z]+|role|scope)"|key', name.strip()), name
    allowed = re.search(r"const SVG_ATTRIBUTES = new Set\(\[([^\]]*)\]\)", code)
    assert allowed and "if (!SVG_ATTRIBUTES.has(key)) throw" in code
    names = re.findall(r'"([^"]+)"', allowed.group(1))
    assert not [name for name in names if name.lower().startswith("on") or "href" in name.lower() or name == "style"]
    # Exactly these: geometry (the charts' and the plan's boxes, lines and arrowheads), class, accessible names.
    assert sorted(names) == sorted(["width", "height", "viewBox", "role", "aria-label", "class", "x", "y", "x1", "y1",
                                    "x2", "y2", "d", "points", "cx", "cy", "r", "rx"])
    assert code.count("setAttribute(") == len(re.findall(r"setAttribute\(([^,]+),", code))  # no other form of the call
    assert "localStorage" not in code and "sessionStorage" not in code and "document.cookie" not in code


def test_the_page_has_no_inline_script_style_or_handler_and_loads_nothing_from_elsewhere():
    for name in ("index.html", "playground.js", "playground.css"):
        text = (PAGE / name).read_text(encoding="utf-8")
        text = text.replace('"http://www.w3.org/2000/svg"', "")  # the SVG namespace's name, never fetched
        assert not re.search(r"https?://", text), f"{name} refers to another origin"
    css = (PAGE / "playground.css").read_text(encoding="utf-8")
    assert "@import" not in css and "url(" not in css
    html = (PAGE / "index.html").read_text(encoding="utf-8")
    assert not re.search(r"\son[a-z]+\s*=", html, re.IGNORECASE)
    assert not re.search(r"\sstyle\s*=", html, re.IGNORECASE)
    assert re.findall(r"<script[^>]*>", html) == ['<script src="/playground/playground.js" defer>']


def test_every_control_has_a_label_and_the_buttons_are_real_buttons():
    html = (PAGE / "index.html").read_text(encoding="utf-8")
    controls = re.findall(r'<(?:input|select|textarea)\b[^>]*\bid="([^"]+)"', html)
    assert controls == ["api-key", "rubric-choice", "rubric-yaml", "input-text", "compare-threshold", "coherence-field",
                        "eval-file"]
    for control in controls:
        assert f'<label for="{control}">' in html, control
    assert 'type="password"' in html and 'autocomplete="off"' in html
    assert len(re.findall(r"<button\b[^>]*\btype=", html)) == len(re.findall(r"<button\b", html)) == 10
    assert "tabindex=\"-" not in html


def test_the_script_calls_only_routes_the_app_has(open_client):
    code = script()
    called = set(re.findall(r'"(/v1/[^"]*)"', code))
    assert called == {"/v1/rubrics/decide", "/v1/rubrics", "/v1/rubrics/", "/v1/rubrics/export", "/v1/rubrics/coherence",
                      "/v1/rubrics/eval", "/v1/rubrics/validate"}
    assert '"/yaml"' in code and '"/decide"' in code
    app_paths = {route.path for route in open_client.app.routes}
    assert {"/v1/rubrics/decide", "/v1/rubrics", "/v1/rubrics/{name}/decide", "/v1/rubrics/{name}/yaml",
            "/v1/rubrics/export", "/v1/rubrics/coherence", "/v1/rubrics/eval", "/v1/rubrics/validate"} <= app_paths


def test_the_wheel_carries_every_file_of_the_page():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["decisionflow.serve"]
    files = sorted(path.name for path in PAGE.iterdir() if path.is_file())
    assert files == ["index.html", "playground.css", "playground.js"]
    for name in files:
        assert any(Path("playground", name).match(pattern) for pattern in patterns), name
    assert "decisionflow.serve" in config["tool"]["setuptools"]["packages"]
