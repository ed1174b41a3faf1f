"""The bundled YAML rubrics in `workflows/` load, validate and match the labelled data they target."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml
from suite_support import FIXTURES, shared_data

from decisionflow.spec.rubric import FieldKind, Rubric, normalise_label

ROOT = Path(__file__).resolve().parents[2]
DATA = shared_data()
WORKFLOWS = sorted((ROOT / "workflows").glob("*.yaml"))
EXPECTED = {
    "support_triage",
    "fintech_fraud",
    "model_routing",
    "banking77_intent",
    "sentiment",
    "issue_triage",
    "clinc150_intent",
}


def load(stem: str) -> Rubric:
    with open(ROOT / "workflows" / f"{stem}.yaml", encoding="utf-8") as handle:
        return Rubric.model_validate(yaml.safe_load(handle))


def data_labels(csv_path: Path, column: str) -> set[str]:
    with open(csv_path, encoding="utf-8", newline="") as handle:
        return {row[column] for row in csv.DictReader(handle)}


def test_all_expected_workflows_exist():
    assert EXPECTED <= {path.stem for path in WORKFLOWS}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.stem)
def test_workflow_validates(path: Path):
    with open(path, encoding="utf-8") as handle:
        data = yaml.safe_load(handle)
    rubric = Rubric.model_validate(data)
    assert rubric.name == path.stem
    assert rubric.instructions.strip()
    first = next(iter(rubric))
    assert not first.after and first.when is None, "the first (pinned) field must not depend on others"
    for spec in rubric:
        assert spec.name == spec.name.lower(), spec.name
        if spec.kind is FieldKind.CHOICE:
            assert spec.options is not None
            # YAML 1.1 turns bare yes/no/on/off keys into booleans; labels must stay strings.
            assert all(isinstance(label, str) for label in spec.options), spec.name
            keys = [normalise_label(label) for label in spec.options]
            assert len(set(keys)) == len(keys), spec.name


@pytest.mark.parametrize("stem", ["support_triage", "fintech_fraud"])
def test_multi_field_workflows_are_rich(stem: str):
    rubric = load(stem)
    assert len(rubric) >= 20
    kinds = [spec.kind for spec in rubric]
    assert FieldKind.SCORE in kinds
    assert FieldKind.BOOLEAN in kinds
    assert FieldKind.CHOICE in kinds
    assert any(spec.after for spec in rubric)
    assert any(spec.when is not None for spec in rubric)
    for spec in rubric:
        if spec.kind is FieldKind.SCORE:
            assert (spec.min, spec.max) == (0, 9)


def test_support_triage_options_are_described():
    rubric = load("support_triage")
    for spec in rubric:
        if spec.kind is FieldKind.CHOICE:
            assert spec.options is not None
            assert 3 <= len(spec.options) <= 6, spec.name
            for label, description in spec.options.items():
                assert description.strip(), f"{spec.name}.{label} has no description"


def test_model_routing_starts_with_route():
    rubric = load("model_routing")
    first = next(iter(rubric))
    assert first.name == "route" and first.kind is FieldKind.CHOICE
    assert first.options is not None and all(first.options.values())


def test_banking77_keeps_odd_labels_verbatim():
    options = load("banking77_intent").field("intent").options
    assert options is not None and len(options) == 77
    assert "Refund_not_showing_up" in options
    assert "reverted_card_payment?" in options
    assert all(description.strip() for description in options.values())


def test_banking77_options_equal_labels_json():
    expected = json.loads((FIXTURES / "banking77_labels.json").read_text(encoding="utf-8"))
    options = load("banking77_intent").field("intent").options
    assert options is not None
    assert list(options) == expected
    assert data_labels(FIXTURES / "banking77_sample.csv", "label") <= set(expected)
    if DATA is not None:
        assert data_labels(DATA / "banking77" / "dev.csv", "label") == set(expected)


def test_clinc150_options_equal_intents():
    labels = json.loads((FIXTURES / "clinc150_labels.json").read_text(encoding="utf-8"))
    options = load("clinc150_intent").field("intent").options
    assert options is not None
    assert list(options) == labels["intents"]
    assert labels["out_of_scope_label"] not in options
    assert data_labels(FIXTURES / "clinc150_sample.csv", "label") <= {*labels["intents"], labels["out_of_scope_label"]}


LABEL_SETS = json.loads((FIXTURES / "label_sets.json").read_text(encoding="utf-8"))


def test_sentiment_labels_match_sst2():
    options = load("sentiment").field("sentiment").options
    assert options is not None
    assert set(options) == set(LABEL_SETS["sst2"]["label"]) == {"negative", "positive"}
    if DATA is not None:
        assert data_labels(DATA / "sst2" / "dev.csv", "label") == set(options)


def test_issue_triage_labels_match_nlbse24():
    rubric = load("issue_triage")
    for column in ("label", "repo"):
        assert set(rubric.field(column).options or {}) == set(LABEL_SETS["nlbse24_issues"][column])
        if DATA is not None:
            assert data_labels(DATA / "nlbse24_issues" / "dev.csv", column) == set(LABEL_SETS["nlbse24_issues"][column])
