"""Heads that read the input's words: the lexicon, the n-gram head, its fusion with the hidden-state head and
the zero-shot readout; how they are chosen, saved, loaded and applied; `eval --baseline tfidf`."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
from suite_support import FIXTURES
from typer.testing import CliRunner

from decisionflow.cli import app
from decisionflow.fitting import fit_heads
from decisionflow.fitting.choosing import MAX_FOLDS, fit_field
from decisionflow.fitting.features import FieldData
from decisionflow.fitting.lexical import fit_lexicon, fit_words, word_matrix
from decisionflow.fitting.training import REGULARISATION_GRID
from decisionflow.runtime.heads.fitted import FORMAT, FieldReadout, Heads, HeadsError, NgramHead, zero_shot_features
from decisionflow.runtime.heads.lexical import Lexicon, analyse, lexical_text
from decisionflow.spec.rubric import Rubric

TAGGED = Rubric.model_validate({"name": "tagged", "fields": {
    "tag": {"kind": "choice", "question": "Which tag the note carries", "options": ["k1", "k2", "k3"]}}})
WORDS = {"k1": "pelican", "k2": "walrus", "k3": "heron"}


def test_the_grams_are_words_word_pairs_and_characters_within_words():
    grams = analyse("Refund NOW")
    assert {"w refund", "w now", "w refund now", "c  r", "c ref", "c und ", "c  now "} <= set(grams)
    assert "c d n" not in grams  # character grams never cross a word boundary
    assert analyse("") == [] and analyse("a") == ["c  a", "c a ", "c  a "]


def test_a_requests_vector_is_the_fitting_matrixs_row():
    texts = ["the refund is late", "refund my card", "the card is lost", "where is my card"]
    lexicon = fit_lexicon(texts)
    assert "w refund" in lexicon.terms and "w lost" not in lexicon.terms  # one row only: below two documents
    matrix = word_matrix(lexicon, [*texts, "nothing known here: zzz"]).toarray()
    for row, text in enumerate([*texts, "nothing known here: zzz"]):
        assert lexicon.vector(text).numpy() == pytest.approx(matrix[row], abs=1e-6)
    assert float(lexicon.vector(texts[0]).norm()) == pytest.approx(1.0)
    assert fit_lexicon(texts, max_terms=5).terms == tuple(sorted(fit_lexicon(texts, max_terms=5).terms))
    assert len(fit_lexicon(texts, max_terms=5)) == 5


def synthetic_data(rows_per_tag: int = 12, seed: int = 0) -> FieldData:
    """Hidden states that carry nothing, and texts whose one word says the tag: only words can tell."""
    generator = torch.Generator().manual_seed(seed)
    data = FieldData()
    for n in range(rows_per_tag):
        for index, word in enumerate(WORDS.values()):
            data.hidden.append(torch.randn(32, generator=generator))
            data.zero_shot.append(torch.log_softmax(torch.zeros(3), 0))
            data.gold.append(index)
            data.zero_shot_answer.append(0)
            data.texts.append(f"note {n}: a {word} was seen near the lake")
    return data


def test_where_only_the_words_tell_a_word_head_is_kept_and_says_why():
    data = synthetic_data()
    lexicon = fit_lexicon(data.texts)
    info, fitted, _ = fit_field(TAGGED, "tag", data, layers=(-1,), zero_shot_features=True, min_rows_per_label=2,
                                regularisation=REGULARISATION_GRID, folds=MAX_FOLDS, seed=0, lexicon=lexicon)
    assert set(info.candidates) == {"zero_shot", "fitted", "ngram", "fused"}
    assert info.candidates["ngram"].accuracy == 1.0 and info.candidates["fitted"].accuracy < 0.7
    assert info.readout == "fitted" and info.head in ("ngram", "fused") and fitted.words is not None
    assert info.why.startswith(f"the best cross-validated accuracy: {info.chosen}")
    assert (info.fusion is not None) == (info.head == "fused")
    without = fit_field(TAGGED, "tag", data, layers=(-1,), zero_shot_features=True, min_rows_per_label=2,
                        regularisation=REGULARISATION_GRID, folds=MAX_FOLDS, seed=0)[0]
    assert set(without.candidates) == {"zero_shot", "fitted"}


def test_a_fused_readout_weighs_three_log_probabilities():
    info = fit_field(TAGGED, "tag", synthetic_data(), layers=(-1,), zero_shot_features=False, min_rows_per_label=2,
                     regularisation=REGULARISATION_GRID, folds=MAX_FOLDS, seed=0)[0]
    hidden = _hidden_head(3, 32)
    words = NgramHead(torch.randn(3, 7), torch.randn(3))
    fused = FieldReadout(info.model_copy(update={"readout": "fitted", "head": "fused", "fusion": (0.5, 2.0, 1.0)}), hidden, words)
    features, vector, zero_shot = torch.randn(32), torch.rand(7), [0.2, 0.5, 0.3]
    expected = torch.softmax(0.5 * torch.log_softmax(hidden.logits(features, None).double(), 0)
                             + 2.0 * torch.log_softmax(words.logits(vector).double(), 0)
                             + 1.0 * torch.tensor(zero_shot).double().log(), 0)
    assert fused.probabilities(features, zero_shot, [0, 1, 2], vector) == pytest.approx(expected.tolist())
    assert fused.method == "fused"
    alone = FieldReadout(info.model_copy(update={"readout": "fitted", "head": "ngram"}), None, words)
    assert alone.probabilities(None, zero_shot, [0, 2], vector) == pytest.approx(
        torch.softmax(words.logits(vector)[[0, 2]].double(), 0).tolist())
    assert alone.method == "ngram" and not alone.info.reads_hidden


def _hidden_head(answers: int, size: int):
    from decisionflow.runtime.heads.fitted import FieldHead

    return FieldHead(torch.randn(answers, size), torch.randn(answers), torch.zeros(size), torch.ones(size))


# -- with the model --------------------------------------------------------------------------------


def sst_rows() -> list[dict[str, str]]:
    with (FIXTURES / "sst2_sample.csv").open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


REVIEW = Rubric.model_validate({"name": "review", "instructions": "Classify one sentence from a movie review.", "fields": {
    "code": {"kind": "choice", "question": "Which code the sentence gets", "options": ["k1", "k2"]}}})
CODE = {"negative": "k1", "positive": "k2"}
"""An opaque code for the sentiment: zero-shot is at chance, a head on the hidden states is not."""


@pytest.fixture(scope="module")
def hidden_only(engine):
    fitted = fit_heads(engine, REVIEW, coded_rows(), words=False, significance=1.0)
    assert "code" in fitted.heads.heads, fitted.fields["code"].candidates
    return fitted


def coded_rows() -> list[tuple[str, dict[str, str]]]:
    return [(r["text"], {"code": CODE[r["label"]]}) for r in sst_rows()]


def word_variant(heads: Heads, head: str, fusion=None) -> Heads:
    """The same heads file with `sentiment` answered by a word head fitted on the fixture's rows (alone, or
    fused): the applying path, apart from which head a fit would choose."""
    rows = coded_rows()
    texts = [lexical_text(text) for text, _ in rows]
    lexicon = fit_lexicon(texts)
    labels = list(REVIEW.fields["code"].labels)
    words = NgramHead(*fit_words(word_matrix(lexicon, texts), [labels.index(gold["code"]) for _, gold in rows]).tensors(1.0, 2, -1e4))
    info = heads.metadata.fields["code"].model_copy(update={"readout": "fitted", "head": head, "fusion": fusion})
    metadata = heads.metadata.model_copy(update={"fields": {"code": info}})
    hidden = heads.heads if head == "fused" else {}
    return Heads(metadata, hidden, ngram={"code": words}, lexicon=lexicon)


@pytest.mark.model
@pytest.mark.parametrize("head", ["ngram", "fused"])
def test_the_engine_applies_word_heads_in_the_same_pass_and_names_them(engine, hidden_only, head, tmp_path):
    heads = word_variant(hidden_only.heads, head, fusion=(0.7, 0.4, 0.2) if head == "fused" else None)
    saved = Heads.load(heads.save(tmp_path / "review.heads.safetensors"))
    assert json.loads((tmp_path / "review.heads.json").read_text())["format"] == FORMAT
    text = "a gorgeous , witty , seductive movie ."
    plain = engine.decide(REVIEW, text)
    for applied in (heads, saved):
        result = engine.decide(REVIEW, text, heads=applied)
        field = result.fields["code"]
        assert field.method == head and result.stats.forward_passes == plain.stats.forward_passes
        assert field.zero_shot_probabilities == pytest.approx(plain.fields["code"].probabilities, abs=1e-6)
        readout = applied.for_field("code")
        expected = readout.probabilities(
            None if head == "ngram" else _features(engine, text, readout.info.layers),
            list(field.zero_shot_probabilities.values()), [0, 1], applied.lexicon.vector(lexical_text(text)))
        assert list(field.probabilities.values()) == pytest.approx(list(expected), abs=1e-4)


def _features(engine, text, layers):
    _, captured = engine.read_features(REVIEW, [text], layers=layers)
    return captured[0]["code"].features


@pytest.mark.model
def test_fit_compares_the_word_heads_and_reports_them(engine):
    result = fit_heads(engine, REVIEW, coded_rows(), significance=1.0)
    info = result.fields["code"]
    assert set(info.candidates) == {"zero_shot", "fitted", "ngram", "fused"}
    assert info.readout == "fitted" and info.why.startswith(f"the best cross-validated accuracy: {info.chosen}")
    assert (result.heads.lexicon is not None) == info.reads_words == ("code" in result.heads.ngram)


def test_damaged_word_heads_are_refused(tmp_path):
    from decisionflow.runtime.heads.fitted import FieldHeadInfo, HeadsMetadata

    info = FieldHeadInfo(labels=("k1", "k2", "k3"), readout="fitted", head="ngram")
    metadata = HeadsMetadata(rubric="tagged", rubric_fingerprint="x", model="m", prompt="p", fields={"tag": info})
    lexicon = Lexicon(("w a", "w b"), torch.ones(2))
    good = Heads(metadata, {}, ngram={"tag": NgramHead(torch.zeros(3, 2), torch.zeros(3))}, lexicon=lexicon)
    loaded = Heads.load(good.save(tmp_path / "good.heads.safetensors"))
    assert loaded.fitted_fields == ["tag"] and loaded.lexicon.terms == ("w a", "w b")
    wide = Heads(metadata, {}, ngram={"tag": NgramHead(torch.zeros(3, 5), torch.zeros(3))}, lexicon=lexicon)
    with pytest.raises(HeadsError, match="the n-gram head's tensors do not fit its 3 answers and the lexicon's 2 terms"):
        Heads.load(wide.save(tmp_path / "wide.heads.safetensors"))
    no_lexicon = Heads(metadata, {}, ngram={"tag": NgramHead(torch.zeros(3, 2), torch.zeros(3))})
    with pytest.raises(HeadsError, match="reads the input's words but the file holds no lexicon"):
        Heads.load(no_lexicon.save(tmp_path / "bare.heads.safetensors"))
    poisoned = Heads(metadata, {}, ngram={"tag": NgramHead(torch.full((3, 2), math.nan), torch.zeros(3))}, lexicon=lexicon)
    with pytest.raises(HeadsError, match="the n-gram head holds values that are not finite"):
        Heads.load(poisoned.save(tmp_path / "nan.heads.safetensors"))
    fused = metadata.model_copy(update={"fields": {"tag": info.model_copy(update={"head": "fused"})}})
    with pytest.raises(HeadsError, match="a fused head without its three finite weights"):
        Heads.load(Heads(fused, {}, ngram=good.ngram, lexicon=lexicon).save(tmp_path / "fused.heads.safetensors"))


def test_a_format_1_file_still_loads_and_answers(tmp_path):
    from decisionflow.runtime.heads.fitted import FieldHeadInfo, HeadsMetadata

    info = FieldHeadInfo(labels=("k1", "k2", "k3"), readout="fitted")
    metadata = HeadsMetadata(format=1, rubric="tagged", rubric_fingerprint="x", model="m", prompt="p", fields={"tag": info})
    head = _hidden_head(3, 7)  # four hidden features and the three zero-shot log-probabilities
    loaded = Heads.load(Heads(metadata, {"tag": head}).save(tmp_path / "old.heads.safetensors"))
    assert loaded.metadata.format == 1 and loaded.lexicon is None and loaded.fitted_fields == ["tag"]
    features = torch.randn(4)
    zero_shot = [0.2, 0.3, 0.5]
    assert loaded.for_field("tag").probabilities(features, zero_shot, [0, 1, 2], None) == pytest.approx(
        head.probabilities(features, zero_shot_features(zero_shot, [0, 1, 2], 3), [0, 1, 2]))


# -- eval --baseline tfidf ---------------------------------------------------------------------------


def invoke(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.mark.model
def test_eval_scores_a_tfidf_baseline_fitted_on_training_rows(tmp_path):
    train = FIXTURES / "sst2_sample.csv"
    result = invoke("eval", "sentiment", "--data", train, "--rows", "0:12", "--baseline", "tfidf", "--train", train,
                    "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    baseline = summary["tfidf"]
    assert baseline["train_rows"] == 40 and baseline["n"] == 12 and baseline["terms"] > 100
    assert 0.0 <= baseline["accuracy"] <= 1.0
    compared = baseline["readout_vs_baseline"]
    assert compared["rows"] == 12 and 0.0 <= compared["mcnemar_p"] <= 1.0
    assert "TF-IDF baseline" in (tmp_path / "out" / "eval.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(("args", "says"), [
    (["--baseline", "tfidf"], "--baseline tfidf needs --train"),
    (["--train", "x.csv"], "add --baseline tfidf"),
    (["--baseline", "bow"], "'bow' is not one (use json or tfidf)"),
])
def test_eval_baseline_usage_errors_come_before_the_model(args, says):
    result = invoke("eval", "sentiment", "--data", FIXTURES / "sst2_sample.csv", *args)
    assert result.exit_code == 2 and says in result.stderr
