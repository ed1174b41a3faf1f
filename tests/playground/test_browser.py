"""The playground in a real browser (Debian's chromium driven by Playwright) against a live server with the bundled
model and an API key: the shipped support-triage workflow run on a ticket shows what the API answers for the same
request; the workflow's YAML, loaded and edited, compares with the served workflow field by field; the coherence
checks, an evaluation of a labelled file and the copies as YAML, a class and two requests show what their routes
answer; a broken YAML rubric shows its located error as text, under the editor as it is typed and on Run; each field
says the round it was read in, what it depends on and which readout answered, and the plan is drawn as the route
plans it; markup typed into the input, the rubric and a labelled file creates no element and no dialog. Each view is
checked with axe-core (vendored in `vendor/`) against the WCAG 2 A and AA rules, and written as a PNG to
`out/playground/` (override with `$DECISIONFLOW_PLAYGROUND_SCREENSHOTS`) for inspection.

chromium comes from apt (`scripts/setup.sh` installs it: `apt-get install -y --no-install-recommends chromium`),
never from `playwright install`; without it this test fails rather than skips."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
from serve_client import TICKETS, Client, running_server  # noqa: E402

from decisionflow import rubric_of  # noqa: E402
from decisionflow.cli.playground import PLAYGROUND_LIMITS  # noqa: E402
from decisionflow.serve import Access, ServeSettings  # noqa: E402
from decisionflow.spec.yaml_rubric import loads_rubric  # noqa: E402

pytestmark = [pytest.mark.model, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
AXE = Path(__file__).resolve().parent / "vendor" / "axe.min.js"
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]
"""The WCAG 2.0, 2.1 and 2.2 A and AA rules of axe-core: contrast, names and labels, keyboard and focus, structure."""
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


CALIBRATED = "tickets_calibrated"
"""A served rubric with a calibration (of its `team` field) beside the shipped workflows."""


@pytest.fixture(scope="module")
def port(engine, tmp_path_factory):
    from decisionflow.runtime.readout.calibration import Calibration, FieldCalibration
    from decisionflow.serve import RubricRegistry
    from decisionflow.serve.registry import Registered

    path = tmp_path_factory.mktemp("calibrated") / f"{CALIBRATED}.yaml"
    path.write_text(TICKETS, encoding="utf-8")
    calibration = Calibration(rubric="tickets", fields={"team": FieldCalibration(temperature=2.0)})
    entries = {**RubricRegistry.from_folder().entries, CALIBRATED: Registered(CALIBRATED, loads_rubric(TICKETS), path,
                                                                              calibration)}
    # The limits `decisionflow playground` serves with: a workflow's YAML sent inline, several new question sets in a row.
    settings = ServeSettings(access=Access(api_keys=(KEY,)), limits=PLAYGROUND_LIMITS)
    with running_server(engine, RubricRegistry(entries), settings) as port:
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


def accessible(page, view: str) -> None:
    """axe-core's WCAG 2 A/AA rules find no violation in the page as it is now. axe is evaluated in the page by the
    test's driver (the page's Content-Security-Policy admits no script but its own, and is left on)."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(AXE.read_text(encoding="utf-8") + "\n;typeof window.axe")
    found = page.evaluate("""async (tags) => {
        const result = await axe.run(document, {runOnly: {type: 'tag', values: tags}, resultTypes: ['violations']});
        return {violations: result.violations.map((v) => ({id: v.id, help: v.help,
                    nodes: v.nodes.slice(0, 5).map((n) => n.target.join(' ') + ': ' + n.failureSummary)})),
                checked: [...result.passes, ...result.violations, ...result.incomplete].map((rule) => rule.id)};
    }""", AXE_TAGS)
    assert found["violations"] == [], (view, found["violations"])
    # The rules that matter most here did run on something (a rule with nothing to check is left out of `checked`).
    assert {"color-contrast", "label", "button-name", "aria-allowed-attr", "document-title", "html-has-lang"} <= set(
        found["checked"]), view


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

    reply = api(port, f"/v1/rubrics/{WORKFLOW}/decide", {"text": TICKET})
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
    assert summary.endswith(" · as served")

    # Each field's dependencies and readout, and the plan drawn: as GET /v1/rubrics and the validate route say.
    listed = {entry["name"]: entry for entry in api(port, "/v1/rubrics").body["rubrics"]}[WORKFLOW]
    described = {field["name"]: field for field in listed["fields"]}
    readout = api(port, "/v1/rubrics/validate", {"name": WORKFLOW}).body["readout"]
    assert readout == {"by": "name", "name": WORKFLOW, "fitted": [], "calibrated": [], "adapter": None}
    for name, field in reply.body["fields"].items():
        assert shown[name]["facts"]["depends on"] == dependencies_text(described[name]), name
        assert shown[name]["facts"]["readout"] == readout_text(field), name
    assert shown["root_cause_area"]["facts"]["depends on"] == "when production_affected is true"
    assert shown["primary_department"]["facts"]["depends on"] == "none"
    drawn = drawn_plan(page)
    rounds = listed["plan"]["rounds"]
    assert drawn["columns"] == [f"round {r['index']}" + (" (pinned)" if r["pinned"] else "") for r in rounds]
    assert sorted(drawn["boxes"]) == sorted(described)
    for round_ in rounds:  # a column per round, left to right
        assert {drawn["boxes"][name] for name in round_["fields"]} == {drawn["boxes"][round_["fields"][0]]}
    assert [drawn["boxes"][r["fields"][0]] for r in rounds] == sorted(drawn["boxes"][r["fields"][0]] for r in rounds)
    edges = {f"{dependency} \u2192 {name} ({'when' if (field['when'] or {}).get('field') == dependency else 'after'})"
             for name, field in described.items() for dependency in field["depends_on"]}
    assert sorted(edge["title"] for edge in drawn["edges"]) == sorted(edges) and len(edges) > 20
    for edge in drawn["edges"]:  # from the right side of the field depended on to the left side of the one reading it
        source, target = edge["title"].split(" ")[0], edge["title"].split(" ")[2]
        assert edge["x1"] == pytest.approx(drawn["boxes"][source] + drawn["width"], abs=0.01), edge
        assert edge["x2"] == pytest.approx(drawn["boxes"][target], abs=0.01), edge
    assert page.text_content("#plan-summary") == (f"{WORKFLOW}: valid: {len(described)} fields, {len(rounds)} rounds "
                                                   f"({len(edges)} dependencies)")
    accessible(page, "support_triage answered")
    page.screenshot(path=str(screenshots / "10-support-triage-top.png"), full_page=True,
                    clip={"x": 0, "y": 0, "width": 1280, "height": 1900})
    page.locator("#plan-view").screenshot(path=str(screenshots / "11-plan.png"))

    page.click("#copy-curl")
    curl = page.text_content("#curl-text")
    assert f"/v1/rubrics/{WORKFLOW}/decide" in curl and "$DECISIONFLOW_API_KEY" in curl and KEY not in curl
    assert json.loads(curl.split("-d ", 1)[1].strip()[1:-1].replace("'\\''", "'")) == {"text": TICKET}


def test_each_field_says_which_readout_answered(page, port):
    """A served rubric with a calibration: its calibrated field says so, the other is zero-shot; the pasted YAML of the
    same rubric is zero-shot throughout."""
    unlock(page)
    page.select_option("#rubric-choice", CALIBRATED)
    assert page.text_content("#rubric-note").startswith("2 fields, 1 forward pass; calibrated.")
    page.fill("#input-text", "I was charged twice, please refund one")
    page.keyboard.press("Control+Enter")
    page.wait_for_function("() => document.getElementById('results-summary').textContent.startsWith('tickets_calibrated')",
                           timeout=60_000)
    answer = api(port, f"/v1/rubrics/{CALIBRATED}/decide", {"text": "I was charged twice, please refund one"}).body
    facts = {name: field["facts"] for name, field in rendered(page).items()}
    assert facts["team"]["readout"] == readout_text(answer["fields"]["team"], calibrated=True) == "zero-shot + calibrated"
    assert facts["refund"]["readout"] == readout_text(answer["fields"]["refund"]) == "zero-shot"
    page.select_option("#rubric-choice", "")
    page.fill("#rubric-yaml", TICKETS)
    page.keyboard.press("Control+Enter")
    page.wait_for_function("() => document.getElementById('results-summary').textContent.startsWith('YAML rubric')",
                           timeout=60_000)
    assert {name: field["facts"]["readout"] for name, field in rendered(page).items()} == {"refund": "zero-shot",
                                                                                          "team": "zero-shot"}
    assert page.text_content("#results-summary").endswith(" · zero-shot")


def test_a_broken_rubric_shows_its_located_error_as_text(page, screenshots):
    checks, decided = [], []
    page.on("request", lambda request: (checks if request.url.endswith("/v1/rubrics/validate") else
                                        decided if request.url.endswith("/decide") else []).append(request))
    unlock(page)
    page.wait_for_function("() => document.getElementById('yaml-check-summary').textContent.startsWith('valid')")
    assert page.text_content("#yaml-check-summary") == "valid: 3 fields, 2 rounds"  # the example rubric
    # Checked as it is typed: once typing pauses, not at every key.
    before = len(checks)
    page.locator("#rubric-yaml").press_sequentially("\n# typed", delay=40)
    page.wait_for_function("() => document.getElementById('yaml-check-summary').textContent.startsWith('valid')")
    page.wait_for_timeout(500)
    assert 1 <= len(checks) - before <= 2 and checks[-1].post_data_json["rubric"].endswith("\n# typed")
    page.fill("#rubric-yaml", BROKEN)
    assert page.input_value("#rubric-choice") == ""  # editing the YAML chooses it
    page.wait_for_function("() => document.getElementById('yaml-check-summary').textContent.startsWith('not valid')")
    assert page.text_content("#yaml-check-summary") == "not valid: 1 problem"
    assert page.eval_on_selector_all("#yaml-check-problems li", "nodes => nodes.map((node) => node.textContent)") == [
        "rubric.fields.team.options: a choice field needs at least two options, got 1 (line 6)"]
    assert decided == []  # checking decides nothing
    page.locator("#rubric-yaml").locator("xpath=..").screenshot(path=str(screenshots / "12-checked-as-typed.png"))
    page.fill("#input-text", "I was charged twice")
    page.click("#run")
    page.wait_for_selector("#error:not([hidden])")
    summary = page.text_content("#error-summary")
    assert summary == "422 RubricError at rubric.fields.team.options: a choice field needs at least two options, got 1 (line 6)"
    assert page.locator("#results").is_hidden()
    accessible(page, "a broken rubric")
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
    assert MARKUP in page.text_content("#plan-graph svg g.box title")  # the question, in the plan's tooltip
    no_injected_markup(page)
    page.screenshot(path=str(screenshots / "04-markup-as-text.png"), full_page=True)

    broken = f"name: hostile\nfields:\n  {MARKUP}: {{kind: boolean, question: q}}\n"
    page.fill("#rubric-yaml", broken)
    page.click("#run")
    page.wait_for_function("() => document.getElementById('status').textContent.startsWith('Refused')")
    assert "<img src=x onerror=alert(1)>" in page.text_content("#error")
    page.wait_for_function("() => document.getElementById('yaml-check-summary').textContent.startsWith('not valid')")
    assert "<img src=x onerror=alert(1)>" in page.text_content("#yaml-check-problems")  # checked as typed, as text
    no_injected_markup(page)
    page.click("#copy-curl")
    assert MARKUP.replace("'", "'\\''") in page.text_content("#curl-text")
    no_injected_markup(page)
    page.screenshot(path=str(screenshots / "05-markup-in-an-error.png"), full_page=True)


def test_the_controls_are_reached_with_tab_in_reading_order(page):
    page.focus("#api-key")
    reached = []
    for _ in range(9):
        page.keyboard.press("Tab")
        reached.append(page.evaluate("() => document.activeElement.id"))
    assert reached[:7] == ["rubric-choice", "reload-rubrics", "load-yaml", "rubric-yaml", "input-text", "run", "copy-curl"]
    labelled = page.evaluate("""() => [...document.querySelectorAll('input, select, textarea')]
        .every((control) => control.labels.length === 1 && control.labels[0].textContent.trim() !== '')""")
    assert labelled


FITTED_READOUTS = {"fitted": "fitted head", "ngram": "fitted head (on the words)", "fused": "fitted head (fused)"}


def readout_text(field: dict, calibrated: bool = False, adapter: bool = False) -> str:
    """Which readout answered a field, as the page writes it."""
    if field.get("asked", True) is False:
        return "not asked"
    parts = [FITTED_READOUTS.get(field["method"], "derived" if field["method"] == "derived" else "zero-shot")]
    return " + ".join(parts + ["calibrated"] * calibrated + ["adapter"] * adapter)


def dependencies_text(field: dict) -> str:
    """A field's dependencies, as the page writes them from `GET /v1/rubrics`'s description."""
    parts = []
    for dependency in field["depends_on"]:
        if field["when"] and field["when"]["field"] == dependency:
            parts.append(f"when {dependency} is " + " or ".join(json.dumps(v) if not isinstance(v, str) else v
                                                                for v in field["when"]["values"]))
        elif field["derived"] and dependency in field["derived"]["reads"]:
            parts.append(f"computed from {dependency}")
        else:
            parts.append(f"after {dependency}")
    return "; ".join(parts) or "none"


def drawn_plan(page) -> dict:
    """The plan's SVG as drawn: column titles, each box's left edge by field, each edge's title and ends."""
    return page.evaluate("""() => {
        const svg = document.querySelector('#plan-graph svg');
        const boxes = [...svg.querySelectorAll('g.box')];
        return {
            columns: [...svg.querySelectorAll('text.column')].map((t) => t.textContent),
            boxes: Object.fromEntries(boxes.map((g) => [g.querySelector('text').textContent, Number(g.querySelector('rect').getAttribute('x'))])),
            width: Number(boxes[0].querySelector('rect').getAttribute('width')),
            edges: [...svg.querySelectorAll('g.edge')].map((g) => ({title: g.querySelector('title').textContent,
                x1: Number(g.querySelector('line').getAttribute('x1')), x2: Number(g.querySelector('line').getAttribute('x2'))})),
        };
    }""")


def api(port, path: str, body=None):
    client = Client(port)
    try:
        if body is None:
            return client.get(path, headers={"Authorization": f"Bearer {KEY}"})
        return client.post(path, body, headers={"Authorization": f"Bearer {KEY}"})
    finally:
        client.close()


def as_shown(field: dict) -> str:
    """A field's answer as the page writes it (`not asked`, a label, `true`, `3`)."""
    if field.get("asked", True) is False:
        return "not asked"
    return field["value"] if isinstance(field["value"], str) else json.dumps(field["value"])


REMOVED = "      infrastructure_reliability: outages, downtime, 5xx or gateway errors, latency, capacity; the on-call\n        site reliability team\n"
"""The primary department's first option, as the served YAML writes it (folded at 100 columns)."""


def test_compare_shows_the_workflow_before_and_after_an_option_is_removed(page, port, screenshots):
    unlock(page)
    page.fill("#input-text", TICKET)
    page.click("#load-yaml")  # the served workflow's YAML, from GET /v1/rubrics/support_triage/yaml
    page.wait_for_function("() => document.getElementById('rubric-yaml').value.startsWith('name: support_triage')")
    before_yaml = page.input_value("#rubric-yaml")
    assert before_yaml == api(port, f"/v1/rubrics/{WORKFLOW}/yaml").body["yaml"]
    assert REMOVED in before_yaml
    after_yaml = before_yaml.replace(REMOVED, "")
    page.fill("#rubric-yaml", after_yaml)
    replies = []  # what the page's two calls were answered: the served workflow by name, the edited YAML inline
    page.on("response", lambda response: replies.append(response) if response.url.endswith("/decide") else None)
    page.click("#compare")
    page.wait_for_selector("#compare-view:not([hidden]), #error:not([hidden])", timeout=60_000)
    assert page.locator("#compare-view").is_visible(), page.text_content("#error")
    assert [reply.url.split("/v1/")[1] for reply in replies] == [f"rubrics/{WORKFLOW}/decide", "rubrics/decide"]
    before, after = (reply.json()["fields"] for reply in replies)
    assert replies[1].request.post_data_json == {"rubric": after_yaml, "text": TICKET}

    rows = page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('#compare-table tbody tr')].map((row) => [
        row.dataset.field, {classes: [...row.classList].sort(), before: row.cells[1].textContent, after: row.cells[2].textContent,
                            delta: row.cells[3].dataset.delta, difference: row.cells[4].textContent}]))""")
    assert list(rows) == list(before)
    for name, field in before.items():
        shown, other = rows[name], after[name]
        assert shown["before"].startswith(as_shown(field)), name
        assert shown["after"].startswith(as_shown(other)), name
        label = as_shown(field)
        moved = None
        if label in field["probabilities"] and label in other["probabilities"]:
            moved = other["probabilities"][label] - field["probabilities"][label]
            assert float(shown["delta"]) == pytest.approx(moved, abs=1e-6), name
        changed = as_shown(field) != as_shown(other)
        assert ("changed" in shown["classes"]) == changed, name
        assert ("moved" in shown["classes"]) == (moved is not None and abs(moved) > 0.05), name
    department = rows["primary_department"]
    assert "infrastructure_reliability" not in department["after"]
    if before["primary_department"]["value"] == "infrastructure_reliability":
        assert "answer changed" in department["difference"]
    accessible(page, "compare")
    page.screenshot(path=str(screenshots / "06-compare.png"), full_page=True)
    page.locator("#compare-view").screenshot(path=str(screenshots / "07-compare-table.png"))


EVAL_CSV = (
    "text,refund,team,urgency,note\n"
    '"I was charged twice, refund the duplicate",true,billing,2,a\n'
    "my parcel never arrived,false,shipping,1,b\n"
    "I cannot log in since this morning,false,technical,3,c\n"
    '"the invoice shows the wrong amount, please fix",false,billing,1,d\n'
)


def test_coherence_eval_and_copy_as_on_the_yaml_rubric(page, port, screenshots):
    unlock(page)
    page.select_option("#rubric-choice", "")
    example = page.input_value("#rubric-yaml")
    text = "I was charged twice this month, please refund one of the charges"
    page.fill("#input-text", text)
    page.keyboard.press("Control+Enter")
    page.wait_for_selector("#results:not([hidden])", timeout=60_000)

    # Coherence: a choice field against its options reversed and rotated and asked alone; a boolean against its negation.
    for field, checks in (("team", ["order", "order", "alone"]), ("refund", ["alone", "negation"])):
        page.select_option("#coherence-field", field)
        page.click("#check-coherence")
        page.wait_for_function(f"() => document.getElementById('coherence-summary').textContent.startsWith('{field} ')",
                               timeout=60_000)
        reply = api(port, "/v1/rubrics/coherence", {"rubric": example, "text": text, "field": field}).body
        shown = page.evaluate("""() => [...document.querySelectorAll('#coherence-table tbody tr')].map((row) =>
            ({check: row.dataset.check, gap: Number(row.querySelector('.gap').dataset.gap), text: row.textContent}))""")
        assert [row["check"] for row in shown] == checks
        for row, check in zip(shown, reply["checks"]):
            assert row["gap"] == pytest.approx(check["gap"], abs=1e-6)
    assert "Whether it is NOT the case that the customer asks for money back" in shown[-1]["text"]
    assert "NOT the case that" in page.text_content("#coherence-note")
    accessible(page, "coherence")

    # Eval: the dropped (here: chosen) file's rows scored by POST /v1/rubrics/eval, drawn as tables and SVG.
    page.set_input_files("#eval-file", files=[{"name": "labelled.csv", "mimeType": "text/csv", "buffer": EVAL_CSV.encode()}])
    page.wait_for_selector("#eval-view:not([hidden]), #error:not([hidden])", timeout=60_000)
    assert page.locator("#eval-view").is_visible(), page.text_content("#error")
    rows = [dict(zip(["text", "refund", "team", "urgency", "note"], line)) for line in (
        ("I was charged twice, refund the duplicate", "true", "billing", "2", "a"),
        ("my parcel never arrived", "false", "shipping", "1", "b"),
        ("I cannot log in since this morning", "false", "technical", "3", "c"),
        ("the invoice shows the wrong amount, please fix", "false", "billing", "1", "d"))]
    figures = api(port, "/v1/rubrics/eval", {"rubric": example, "rows": rows}).body
    assert page.text_content("#eval-summary") == ("labelled.csv: 4 rows · 3 labelled fields · 0 row errors · "
                                                  "columns not read: note")
    for name, summary in figures["fields"].items():
        section = page.locator(f"#eval-fields .eval-field[data-field='{name}']")
        assert section.locator("dd[data-fact='accuracy']").text_content() == f"{summary['accuracy']:.3f}"
        counts = section.locator("table.confusion tbody td").all_text_contents()
        assert [int(count) for count in counts] == [count for row in summary["confusion"]["counts"] for count in row]
        assert section.locator("svg.chart").count() == 2
        drawn = sum(1 for b in summary["reliability"] if b["count"] and b["accuracy"] is not None)
        assert section.locator("svg.chart rect.bin").count() == drawn
        assert section.locator("svg.chart circle.point").count() == sum(
            1 for p in summary["coverage_curve"] if p["coverage"] is not None and p["accuracy"] is not None)
    assert page.text_content("#eval-how") == "Evaluated the YAML in the editor (tickets), zero-shot."
    accessible(page, "eval")
    page.screenshot(path=str(screenshots / "08-eval.png"), full_page=True)
    page.locator("#eval-view").screenshot(path=str(screenshots / "09-eval-figures.png"))

    # Copy as: YAML and a @decision class that read back as the rubric; the requests the server answers.
    copied = {}
    for what in ("yaml", "python", "systemone", "decisions"):
        page.click(f"#copy-{what}")
        page.wait_for_function(f"() => document.getElementById('curl-text').dataset.format === '{what}'")
        copied[what] = page.text_content("#curl-text")
    rubric = loads_rubric(example)
    assert loads_rubric(copied["yaml"]) == rubric
    scope: dict = {"__name__": "copied"}
    exec(compile(copied["python"], "copied", "exec", dont_inherit=True), scope)  # noqa: S102 - the page's copy
    assert rubric_of(scope["Tickets"]) == rubric
    for route, what in (("/v1/systemone", "systemone"), ("/v1/decisions", "decisions")):
        reply = api(port, route, json.loads(copied[what]))
        assert reply.status == 200, (route, reply.body)
    assert KEY not in "".join(copied.values())

    # A served rubric, chosen and not edited, is evaluated by name (as served: its calibration, heads and adapter).
    page.select_option("#rubric-choice", "sentiment")
    with page.expect_request(lambda request: request.url.endswith("/v1/rubrics/eval")) as sent:
        page.set_input_files("#eval-file", files=[{"name": "reviews.csv", "mimeType": "text/csv",
                                                   "buffer": b"text,sentiment\na gorgeous film,positive\na dull mess,negative\n"}])
    assert sent.value.post_data_json == {"name": "sentiment", "rows": [{"text": "a gorgeous film", "sentiment": "positive"},
                                                                      {"text": "a dull mess", "sentiment": "negative"}]}
    page.wait_for_function("() => document.getElementById('eval-summary').textContent.startsWith('reviews.csv')",
                           timeout=60_000)
    assert page.text_content("#eval-how") == ("Evaluated sentiment as served, by name: zero-shot (it has no calibration, "
                                              "heads or adapter).")


def test_markup_stays_text_in_compare_coherence_and_eval(page, screenshots):
    unlock(page)
    page.fill("#rubric-yaml", HOSTILE_RUBRIC)
    page.fill("#input-text", MARKUP)
    page.keyboard.press("Control+Enter")
    page.wait_for_selector("#results:not([hidden])", timeout=60_000)
    page.click("#compare")  # the example rubric as loaded, against the hostile one
    page.wait_for_selector("#compare-view:not([hidden])", timeout=60_000)
    assert page.locator("#compare-table tr[data-field='verdict']").count() == 1
    page.select_option("#coherence-field", "verdict")
    page.click("#check-coherence")
    page.wait_for_function("() => document.getElementById('coherence-summary').textContent.startsWith('verdict ')",
                           timeout=60_000)
    assert "<img src=x onerror=alert(3)>" in page.text_content("#coherence-table")
    labelled = f'text,verdict\n"{MARKUP.replace(chr(34), chr(34) * 2)}","<img src=x onerror=alert(3)>"\n'
    page.set_input_files("#eval-file", files=[{"name": "<b>x</b>.csv", "mimeType": "text/csv", "buffer": labelled.encode()}])
    page.wait_for_selector("#eval-view:not([hidden])", timeout=60_000)
    assert page.text_content("#eval-summary").startswith("<b>x</b>.csv: 1 row")
    assert "<img src=x onerror=alert(3)>" in page.text_content("#eval-fields")
    page.click("#copy-python")
    page.wait_for_function("() => document.getElementById('curl-text').dataset.format === 'python'")
    no_injected_markup(page)
    too_many = "text,verdict\n" + "".join(f"row {i},x\n" for i in range(101))
    page.evaluate("""(text) => {  // dropped on the box, as a file dragged from the desktop is
        const dropped = new DataTransfer();
        dropped.items.add(new File([text], 'many.csv', {type: 'text/csv'}));
        document.getElementById('eval-drop').dispatchEvent(new DragEvent('drop', {dataTransfer: dropped, bubbles: true}));
    }""", too_many)
    page.wait_for_function("() => document.getElementById('status').textContent.startsWith('Refused')")
    assert page.text_content("#error-summary").startswith("400 DataError at rows: at most 100 rows")
    no_injected_markup(page)
