"""The playground in a real browser (Debian's chromium driven by Playwright) against a live server with the bundled
model and an API key: the shipped support-triage workflow run on a ticket shows what the API answers for the same
request; a broken YAML rubric shows its located error as text; markup typed into the input and the rubric creates
no element and no dialog. Each view is written as a PNG to `out/playground/` (override with
`$DECISIONFLOW_PLAYGROUND_SCREENSHOTS`) for inspection.

chromium comes from apt (`scripts/setup.sh` installs it: `apt-get install -y --no-install-recommends chromium`),
never from `playwright install`; without it this test fails rather than skips."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
from serve_client import Client, running_server  # noqa: E402

from decisionflow.serve import Access, ServeSettings  # noqa: E402

pytestmark = [pytest.mark.model, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
SETUP_STEP = ("scripts/setup.sh installs it as root (`apt-get install -y --no-install-recommends chromium`); "
              "Playwright comes with the dev extra (`pip install -e '.[dev]'`)")
KEY = "playground-browser-key-9d27"
WORKFLOW = "support_triage"
TICKET = ("Subject: URGENT - API down, every call returns 502\n\n"
          "Since 09:00 UTC our production checkout cannot reach your API: every request fails with a 502 from the "
          "gateway and we are losing orders by the minute. This is the third outage this month. We expect a "
          "service credit under our SLA and are reviewing the contract.\n-- Dana, Head of Engineering, Northwind Retail")
BROKEN = "name: broken\nfields:\n  team:\n    kind: choice\n    question: Which team handles it\n    options: [billing]\n"
MARKUP = '<img src=x onerror=alert(1)><script>window.__injected = 1; alert(2)</script>'
HOSTILE_RUBRIC = f"""\
name: hostile
instructions: 'Judge the message. {MARKUP}'
fields:
  verdict:
    kind: choice
    question: 'Which answer fits {MARKUP}'
    options:
      '<img src=x onerror=alert(3)>': an image tag
      '<script>alert(4)</script>': a script tag
"""


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: the playground's browser test drives Debian's chromium; {SETUP_STEP}",
                    pytrace=False)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(f"Playwright for Python is missing; {SETUP_STEP}", pytrace=False)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def port(engine):
    from decisionflow.serve import RubricRegistry

    settings = ServeSettings(access=Access(api_keys=(KEY,)))
    with running_server(engine, RubricRegistry.from_folder(), settings) as port:
        yield port


@pytest.fixture(scope="module")
def screenshots() -> Path:
    folder = Path(os.environ.get("DECISIONFLOW_PLAYGROUND_SCREENSHOTS", ROOT / "out" / "playground"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def page(browser, port):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    opened.dialogs = []  # every dialog the page tried to open (none may)
    opened.on("dialog", lambda dialog: (opened.dialogs.append(dialog.message), dialog.dismiss()))
    opened.goto(f"http://127.0.0.1:{port}/?rubric={WORKFLOW}")
    yield opened
    context.close()


def unlock(page) -> None:
    """The server asks for a key: the page says so; typed (and left with Tab), the rubrics are listed."""
    page.wait_for_function("() => document.getElementById('status').textContent.includes('API key')")
    assert page.locator("#error").is_visible()
    page.fill("#api-key", KEY)
    page.keyboard.press("Tab")
    page.wait_for_function("() => document.getElementById('rubric-choice').options.length > 1")


def rendered(page) -> dict:
    """Each field as the page shows it: its answer, its bars' probabilities and its facts."""
    return page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('#fields .field')].map((section) => [
        section.dataset.field,
        {value: JSON.parse(section.querySelector('.value').dataset.value),
         shown: section.querySelector('.value').textContent,
         bars: Object.fromEntries([...section.querySelectorAll('.bar')].map((bar) =>
             [bar.dataset.option, Number(bar.querySelector('.bar-value').dataset.probability)])),
         facts: Object.fromEntries([...section.querySelectorAll('dd')].map((dd) => [dd.dataset.fact, dd.textContent]))},
    ]))""")


def no_injected_markup(page) -> None:
    found = page.evaluate("""() => ({images: document.images.length,
        scripts: [...document.scripts].map((s) => s.getAttribute('src')),
        injected: typeof window.__injected, iframes: document.querySelectorAll('iframe, object, embed').length})""")
    assert found == {"images": 0, "scripts": ["/playground/playground.js"], "injected": "undefined", "iframes": 0}
    assert page.dialogs == []


def test_the_page_runs_the_support_triage_workflow_and_shows_what_the_api_answers(page, port, screenshots):
    page.screenshot(path=str(screenshots / "01-asks-for-the-key.png"), full_page=True)
    unlock(page)
    assert page.input_value("#rubric-choice") == WORKFLOW  # chosen by ?rubric=
    assert page.evaluate("() => localStorage.length + sessionStorage.length + document.cookie.length") == 0
    page.fill("#input-text", TICKET)
    page.keyboard.press("Control+Enter")
    page.wait_for_selector("#results:not([hidden])", timeout=60_000)
    page.screenshot(path=str(screenshots / "02-support-triage.png"), full_page=True)

    api = Client(port)
    try:
        reply = api.post(f"/v1/rubrics/{WORKFLOW}/decide", {"text": TICKET}, headers={"Authorization": f"Bearer {KEY}"})
    finally:
        api.close()
    assert reply.status == 200, reply.body
    shown = rendered(page)
    assert list(shown) == list(reply.body["fields"])
    for name, field in reply.body["fields"].items():
        got = shown[name]
        assert got["value"] == field["value"], name
        assert got["bars"].keys() == field["probabilities"].keys(), name
        for label, p in field["probabilities"].items():
            assert got["bars"][label] == pytest.approx(p, abs=1e-6), (name, label)
        assert got["facts"]["round"] == (str(field["round"]) if field["round"] is not None else "n/a"), name
        if field.get("asked", True):
            ranked = sorted(field["probabilities"].items(), key=lambda item: -item[1])
            assert got["facts"]["runner-up"].startswith(ranked[1][0] + " ("), name
            if field["candidate_mass"] is not None:
                assert got["facts"]["candidate mass"] == f"{field['candidate_mass']:.3f}", name
        else:
            assert got["shown"] == "not asked"
    summary = page.text_content("#results-summary")
    assert summary.startswith(f"{WORKFLOW} · {len(reply.body['fields'])} fields · ") and " forward passes" in summary

    page.click("#copy-curl")
    curl = page.text_content("#curl-text")
    assert f"/v1/rubrics/{WORKFLOW}/decide" in curl and "$DECISIONFLOW_API_KEY" in curl and KEY not in curl
    assert json.loads(curl.split("-d ", 1)[1].strip()[1:-1].replace("'\\''", "'")) == {"text": TICKET}


def test_a_broken_rubric_shows_its_located_error_as_text(page, screenshots):
    unlock(page)
    page.fill("#rubric-yaml", BROKEN)
    assert page.input_value("#rubric-choice") == ""  # editing the YAML chooses it
    page.fill("#input-text", "I was charged twice")
    page.click("#run")
    page.wait_for_selector("#error:not([hidden])")
    summary = page.text_content("#error-summary")
    assert summary == "422 RubricError at rubric.fields.team.options: a choice field needs at least two options, got 1 (line 6)"
    assert page.locator("#results").is_hidden()
    page.screenshot(path=str(screenshots / "03-rubric-error.png"), full_page=True)


def test_markup_in_the_input_and_the_rubric_stays_text(page, screenshots):
    unlock(page)
    page.fill("#api-key", KEY)
    page.fill("#rubric-yaml", HOSTILE_RUBRIC)
    page.fill("#input-text", MARKUP)
    page.keyboard.press("Control+Enter")
    page.wait_for_selector("#results:not([hidden]), #error:not([hidden])", timeout=60_000)
    assert page.locator("#results").is_visible(), page.text_content("#error")
    labels = page.eval_on_selector_all("#fields .bar-label", "nodes => nodes.map((node) => node.textContent)")
    assert labels == ["<img src=x onerror=alert(3)>", "<script>alert(4)</script>"]
    no_injected_markup(page)
    page.screenshot(path=str(screenshots / "04-markup-as-text.png"), full_page=True)

    broken = f"name: hostile\nfields:\n  {MARKUP}: {{kind: boolean, question: q}}\n"
    page.fill("#rubric-yaml", broken)
    page.click("#run")
    page.wait_for_function("() => document.getElementById('status').textContent.startsWith('Refused')")
    assert "<img src=x onerror=alert(1)>" in page.text_content("#error")
    no_injected_markup(page)
    page.click("#copy-curl")
    assert MARKUP.replace("'", "'\\''") in page.text_content("#curl-text")
    no_injected_markup(page)
    page.screenshot(path=str(screenshots / "05-markup-in-an-error.png"), full_page=True)


def test_the_controls_are_reached_with_tab_in_reading_order(page):
    page.focus("#api-key")
    reached = []
    for _ in range(8):
        page.keyboard.press("Tab")
        reached.append(page.evaluate("() => document.activeElement.id"))
    assert reached[:6] == ["rubric-choice", "reload-rubrics", "rubric-yaml", "input-text", "run", "copy-curl"]
    labelled = page.evaluate("""() => [...document.querySelectorAll('input, select, textarea')]
        .every((control) => control.labels.length === 1 && control.labels[0].textContent.trim() !== '')""")
    assert labelled
