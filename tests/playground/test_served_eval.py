"""`POST /v1/rubrics/eval` given a served rubric by name decides each row as the rubric's own route does: with the
fitted heads and the calibration saved beside it (a YAML copy of the same rubric is read zero-shot), and says so
(`evaluated`); `POST /v1/rubrics/validate` reports the same readout, and the adapter the server merges.

The heads are fitted once for the module with the bundled model on a rubric whose answers are opaque names
(`red`, `green`, `blue` for billing, shipping and login messages): zero-shot is near chance there and a head
is kept. The calibration asks `refund` for a probability of 0.999 before answering, so it abstains on every row.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
from serve_client import DESK, Client, client_of_port, running_server  # noqa: E402, F401 - fixtures
from serve_client import DESK_ROWS as ROWS

from decisionflow.fitting import fit_heads  # noqa: E402
from decisionflow.runtime.heads.fitted import Heads  # noqa: E402
from decisionflow.runtime.readout.calibration import Calibration, FieldCalibration  # noqa: E402
from decisionflow.serve import RubricRegistry  # noqa: E402
from decisionflow.serve.workbench import MAX_EVAL_ROWS  # noqa: E402
from decisionflow.spec.yaml_rubric import load_rubric  # noqa: E402

pytestmark = pytest.mark.model

LABELLED = [{"text": text, "queue": label, "refund": label == "red" and index == 3}
            for label, texts in ROWS.items() for index, text in enumerate(texts[:4])][::2]
"""Six of the fitted rows, two of each queue."""


@pytest.fixture(scope="module")
def folder(engine, tmp_path_factory) -> Path:
    """`desk.yaml` with heads fitted on the rows and a calibration beside it."""
    folder = tmp_path_factory.mktemp("desk")
    path = folder / "desk.yaml"
    path.write_text(DESK, encoding="utf-8")
    rubric = load_rubric(path)
    fitted = fit_heads(engine, rubric, [(text, {"queue": label}) for label, texts in ROWS.items() for text in texts])
    assert fitted.heads.fitted_fields == ["queue"], "the fit kept zero-shot for `queue`; the test needs a head"
    fitted.heads.save(Heads.path_for(path))
    Calibration(rubric="desk", fields={"refund": FieldCalibration(min_probability=0.999)}).save(Calibration.path_for(path))
    return folder


@pytest.fixture(scope="module")
def port(engine, folder):
    registry = RubricRegistry.from_folder(folder)
    assert registry.get("desk").heads is not None and registry.get("desk").calibration is not None
    with running_server(engine, registry) as port:
        yield port


def confusion(rubric, decisions, field: str) -> list[list[int]]:
    """The confusion counts the route writes (gold by answer, `(none)` last) for `decisions` of LABELLED."""
    options = [str(label) for label in rubric.fields[field].labels]
    columns = options + ["(none)"]
    counts = [[0] * len(columns) for _ in options]
    for row, decision in zip(LABELLED, decisions):
        value = decision.fields[field].value
        answer = ("true" if value else "false") if isinstance(value, bool) else value
        gold = ("true" if row[field] else "false") if isinstance(row[field], bool) else row[field]
        counts[options.index(gold)][columns.index(answer if answer in options else "(none)")] += 1
    return counts


def test_a_served_rubric_by_name_is_evaluated_with_its_heads_and_calibration(client, engine, folder):
    rubric = load_rubric(folder / "desk.yaml")
    heads = Heads.load(Heads.path_for(folder / "desk.yaml"))
    calibration = Calibration.load(Calibration.path_for(folder / "desk.yaml"))
    served = [engine.decide(rubric, row["text"], heads=heads, calibration=calibration) for row in LABELLED]
    zero_shot = [engine.decide(rubric, row["text"]) for row in LABELLED]
    assert all(decision.fields["refund"].abstained for decision in served)  # what the calibration does here
    assert confusion(rubric, served, "queue") != confusion(rubric, zero_shot, "queue")  # what the heads do here

    by_name = client.post("/v1/rubrics/eval", {"name": "desk", "rows": LABELLED})
    by_yaml = client.post("/v1/rubrics/eval", {"rubric": DESK, "rows": LABELLED})
    assert by_name.status == 200 and by_yaml.status == 200, (by_name.body, by_yaml.body)
    assert by_name.body["evaluated"] == {"by": "name", "name": "desk", "fitted": ["queue"], "calibrated": ["refund"],
                                         "adapter": None}
    assert by_yaml.body["evaluated"] == {"by": "yaml", "name": None, "fitted": [], "calibrated": [], "adapter": None}
    named, inline = by_name.body["fields"], by_yaml.body["fields"]
    assert named["queue"]["confusion"]["counts"] == confusion(rubric, served, "queue")
    assert inline["queue"]["confusion"]["counts"] == confusion(rubric, zero_shot, "queue")
    assert named["refund"]["abstention"]["coverage"] == 0.0  # every row abstained under the calibration
    assert inline["refund"]["abstention"]["coverage"] == 1.0
    assert sum(row[-1] for row in named["refund"]["confusion"]["counts"]) == len(LABELLED)  # each under `(none)`
    assert sum(row[-1] for row in inline["refund"]["confusion"]["counts"]) == 0

    validated = client.post("/v1/rubrics/validate", {"name": "desk"})
    assert validated.status == 200 and validated.body["readout"] == by_name.body["evaluated"]


def test_eval_by_name_keeps_the_limits_of_eval(client):
    rows = [{"text": f"row {i}", "queue": "red"} for i in range(MAX_EVAL_ROWS + 1)]
    over = client.post("/v1/rubrics/eval", {"name": "desk", "rows": rows})
    assert over.status == 400 and over.body["error"]["field"] == "rows"
    assert f"at most {MAX_EVAL_ROWS} rows" in over.body["error"]["message"]
    missing = client.post("/v1/rubrics/eval", {"name": "nope", "rows": LABELLED[:1]})
    assert missing.status == 404 and missing.body["error"]["field"] == "name"
    both = client.post("/v1/rubrics/eval", {"name": "desk", "rubric": DESK, "rows": LABELLED[:1]})
    assert both.status == 400 and both.body["error"]["field"] == "name"
    unreadable = client.post("/v1/rubrics/eval", {"name": "desk", "rows": [{"text": 3, "queue": "red"}]})
    assert unreadable.status == 400 and unreadable.body["error"]["field"] == "rows[0].text"


def test_the_adapter_the_server_merges_is_reported(engine, folder):
    """An adapter merged into the model (`serve --adapter`) is named by validate and eval: every route reads through it."""
    from decisionflow.runtime.adapter import Adapter, AdapterMetadata
    from decisionflow.runtime.prefix_store import weights_fingerprint

    model = engine.base_loaded.model
    name = "model.layers.0.self_attn.q_proj"
    width = model.get_submodule(name).weight.shape
    generator = torch.Generator().manual_seed(0)
    weights = {name: (torch.randn(2, width[1], generator=generator) * 0.01,
                      torch.randn(width[0], 2, generator=generator) * 0.01)}
    metadata = AdapterMetadata(rubric="desk", rubric_fingerprint="test", model="test", weights=weights_fingerprint(model),
                               rank=2, alpha=2.0, targets=["q_proj"])
    tuned = folder.parent / "desk-tuned"  # heads fitted on the model without the adapter would not fit it: none here
    tuned.mkdir(exist_ok=True)
    (tuned / "desk.yaml").write_text(DESK, encoding="utf-8")
    adapter = Adapter(metadata, weights)
    adapter.save(tuned / "desk.adapter.safetensors")
    adapted = engine.with_adapter(adapter)
    expected = {"file": "desk.adapter.safetensors", "rank": 2, "targets": ["q_proj"], "tuned_for": "desk"}
    with running_server(adapted, RubricRegistry.from_folder(tuned)) as port:
        client = Client(port)
        try:
            for body in ({"name": "desk"}, {"rubric": DESK}):
                reply = client.post("/v1/rubrics/validate", body)
                assert reply.status == 200 and reply.body["readout"]["adapter"] == expected, reply.body
            evaluated = client.post("/v1/rubrics/eval", {"name": "desk", "rows": LABELLED[:2]})
            assert evaluated.status == 200 and evaluated.body["evaluated"]["adapter"] == expected, evaluated.body
        finally:
            client.close()
