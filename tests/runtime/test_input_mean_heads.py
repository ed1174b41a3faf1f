"""A fused head's fourth member: a head on the input's hidden states averaged over its positions. The pass
that feeds a request's input hands the mean back; the fit cross-validates the member inside the fusion; the
heads file carries it (format 3) and refuses it damaged."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from test_word_heads import REVIEW, coded_rows, synthetic_data

from decisionflow.fitting import fit_heads
from decisionflow.fitting.choosing import MAX_FOLDS, fit_field
from decisionflow.fitting.lexical import fit_lexicon
from decisionflow.fitting.training import REGULARISATION_GRID
from decisionflow.runtime.heads.fitted import (
    FORMAT,
    FieldHead,
    FieldHeadInfo,
    FieldReadout,
    Heads,
    HeadsError,
    HeadsMetadata,
    NgramHead,
    rubric_fingerprint,
)
from decisionflow.runtime.heads.lexical import Lexicon, lexical_text
from decisionflow.runtime.passes.backend import PackedPass, RequestContext
from decisionflow.spec.rubric import Rubric

TEXTS = ["a gorgeous , witty , seductive movie .", "the plot is thin and the jokes fall flat , again and again .", "meh"]
CHAINED = Rubric.model_validate({"name": "chained", "pin_first": False, "fields": {
    "sentiment": {"kind": "choice", "question": "Whether the sentence is negative or positive", "options": ["negative", "positive"]},
    "code": {"kind": "choice", "question": "Which code the sentence gets", "options": ["k1", "k2"], "after": ["sentiment"]},
}})


def reference_mean(engine, rubric, text, layers):
    """The input's hidden states at `layers` averaged over its positions, read alone in a pass of its own."""
    compiled, _ = engine.compile(rubric)
    prepared = engine.prepared.get(rubric)
    engine.prepared.ensure_prefix(prepared)
    tokens = compiled.request_tokens(text)
    packed, last = PackedPass(), -1
    for token in tokens:
        last = packed.add(token, parent=last, request=0)
    features = engine.backend.run_pass_with_features(prepared.prefix, [RequestContext()], packed, [last], layers,
                                                           list(range(len(tokens)))).features
    return features.mean(dim=0)


@pytest.mark.model
def test_the_pass_that_feeds_the_input_hands_back_its_mean_to_every_round(engine):
    _, captured = engine.read_features(CHAINED, TEXTS, layers=(-1,), mean_layers=(-8, -2))
    for text, reads in zip(TEXTS, captured):
        expected = reference_mean(engine, CHAINED, text, (-8, -2))
        assert set(reads) == {"sentiment", "code"}  # the second field is read a round later, in another pass
        for read in reads.values():
            assert read.input_mean.shape == expected.shape
            assert torch.allclose(read.input_mean, expected, atol=1e-4), (text, (read.input_mean - expected).abs().max())
    means = [reads["code"].input_mean for reads in captured]
    assert not torch.allclose(means[0], means[1], atol=1e-2)  # each request its own rows, not the batch's
    _, without = engine.read_features(CHAINED, TEXTS[:1], layers=(-1,))
    assert without[0]["code"].input_mean is None


GATED = Rubric.model_validate({"name": "gated", "pin_first": False, "fields": {
    "sentiment": {"kind": "choice", "question": "Whether the sentence is negative or positive", "options": ["negative", "positive"]},
    "code": {"kind": "choice", "question": "Which code the sentence gets", "options": ["k1", "k2"],
             "when": {"sentiment": ["positive"]}},
}})


@pytest.mark.model
def test_a_request_with_nothing_to_read_in_a_later_pass_keeps_its_mean(engine):
    # The long input's second field is not asked: the next pass holds only the short input's row, and
    # the long input's positions in the first pass must not be read in it.
    texts = [TEXTS[1] * 4, TEXTS[2]]
    _, captured = engine.read_features(GATED, texts, layers=(-1,), mean_layers=(-8,),
                                       write=[{"sentiment": "negative"}, {"sentiment": "positive"}])
    assert set(captured[0]) == {"sentiment"} and set(captured[1]) == {"sentiment", "code"}
    for text, reads in zip(texts, captured):
        expected = reference_mean(engine, GATED, text, (-8,))
        for read in reads.values():
            assert torch.allclose(read.input_mean, expected, atol=1e-4)


def mean_only_data(rows_per_tag: int = 12):
    """Answer-position states and words that carry nothing, an input mean whose first coordinate says the tag."""
    data = synthetic_data(rows_per_tag)
    generator = torch.Generator().manual_seed(1)
    data.texts = [f"note {n}: something was seen near the lake" for n in range(len(data.gold))]
    data.input_mean = [torch.randn(16, generator=generator) + torch.nn.functional.one_hot(torch.tensor(g), 16) * 4
                       for g in data.gold]
    return data


def test_where_only_the_input_mean_tells_the_fusion_leans_on_its_fourth_member():
    data = mean_only_data()
    info, fitted, _ = fit_field(REVIEW_TAGGED, "tag", data, layers=(-1,), zero_shot_features=True, min_rows_per_label=2,
                                regularisation=REGULARISATION_GRID, folds=MAX_FOLDS, seed=0,
                                lexicon=fit_lexicon(data.texts), mean_layers=(-8,))
    assert info.readout == "fitted" and info.head == "fused" and info.mean_layers == (-8,)
    assert info.candidates["fused"].accuracy > 0.9 > max(info.candidates[c].accuracy for c in ("fitted", "ngram"))
    assert len(info.fusion) == 4 and info.fusion[3] == max(info.fusion)
    assert fitted.input_mean is not None and fitted.input_mean.feature_size == 16 + 3
    without = fit_field(REVIEW_TAGGED, "tag", data, layers=(-1,), zero_shot_features=True, min_rows_per_label=2,
                        regularisation=REGULARISATION_GRID, folds=MAX_FOLDS, seed=0, lexicon=fit_lexicon(data.texts))[0]
    assert without.mean_layers == () and without.candidates["fused"].accuracy < 0.7


REVIEW_TAGGED = Rubric.model_validate({"name": "tagged", "fields": {
    "tag": {"kind": "choice", "question": "Which tag the note carries", "options": ["k1", "k2", "k3"]}}})


def test_a_fourth_member_adds_its_weighted_log_probabilities():
    info = FieldHeadInfo(labels=("k1", "k2", "k3"), readout="fitted", head="fused", fusion=(0.5, 2.0, 1.0, 1.5),
                         layers=(-1,), mean_layers=(-8,), zero_shot_features=False)
    torch.manual_seed(0)
    hidden, mean_head = (FieldHead(torch.randn(3, 8), torch.randn(3), torch.zeros(8), torch.ones(8)) for _ in range(2))
    words = NgramHead(torch.randn(3, 5), torch.randn(3))
    features, mean, vector, zero_shot = torch.randn(8), torch.randn(8), torch.rand(5), [0.2, 0.5, 0.3]
    expected = torch.softmax(0.5 * torch.log_softmax(hidden.logits(features, None).double(), 0)
                             + 2.0 * torch.log_softmax(words.logits(vector).double(), 0)
                             + 1.0 * torch.tensor(zero_shot).double().log()
                             + 1.5 * torch.log_softmax(mean_head.logits(mean, None).double(), 0), 0)
    readout = FieldReadout(info, hidden, words, mean_head)
    assert readout.probabilities(features, zero_shot, [0, 1, 2], vector, mean) == pytest.approx(expected.tolist())
    assert info.reads_means and info.members == 4
    assert not info.model_copy(update={"mean_layers": ()}).reads_means


@pytest.fixture(scope="module")
def fitted_review(engine):
    return fit_heads(engine, REVIEW, coded_rows(), significance=1.0)


def with_mean_member(heads: Heads, hidden_size: int) -> Heads:
    """The fitted heads with `code` answered by a four-member fusion (its mean member's weights drawn at random:
    the applying path, apart from what a fit would choose)."""
    info = heads.metadata.fields["code"]
    assert info.readout == "fitted" and info.head in ("fused", "multinomial", "ngram")
    generator = torch.Generator().manual_seed(3)
    size = hidden_size + 2
    mean_head = FieldHead(torch.randn(2, size, generator=generator), torch.randn(2, generator=generator),
                          torch.zeros(size), torch.ones(size))
    four = info.model_copy(update={"head": "fused", "fusion": (0.6, 0.3, 0.1, 0.8), "mean_layers": (-8,)})
    metadata = heads.metadata.model_copy(update={"fields": {"code": four}})
    return Heads(metadata, heads.heads, ngram=heads.ngram, lexicon=heads.lexicon, input_mean={"code": mean_head})


@pytest.mark.model
def test_the_engine_applies_a_mean_member_in_the_same_passes(engine, fitted_review, tmp_path):
    assert "code" in fitted_review.heads.heads and "code" in fitted_review.heads.ngram, fitted_review.fields["code"]
    heads = with_mean_member(fitted_review.heads, int(engine.backend.config.hidden_size))
    saved = Heads.load(heads.save(tmp_path / "review.heads.safetensors"))
    assert json.loads((tmp_path / "review.heads.json").read_text())["format"] == FORMAT == 3
    assert saved.mean_layers == (-8,) and saved.for_field("code").input_mean is not None
    plain = engine.decide(REVIEW, TEXTS[1])
    for applied in (heads, saved):
        result = engine.decide(REVIEW, TEXTS[1], heads=applied)
        field = result.fields["code"]
        assert field.method == "fused" and result.stats.forward_passes == plain.stats.forward_passes
        readout = applied.for_field("code")
        _, captured = engine.read_features(REVIEW, [TEXTS[1]], layers=readout.info.layers)
        expected = readout.probabilities(captured[0]["code"].features, list(field.zero_shot_probabilities.values()),
                                         [0, 1], applied.lexicon.vector(lexical_text(TEXTS[1])),
                                         reference_mean(engine, REVIEW, TEXTS[1], (-8,)))
        assert list(field.probabilities.values()) == pytest.approx(list(expected), abs=1e-4)
    # Batched with other inputs, each request's answer reads its own input's mean.
    batch = engine.decide_many(REVIEW, TEXTS, heads=saved)
    for text, decision in zip(TEXTS, batch):
        alone = engine.decide(REVIEW, text, heads=saved)
        assert decision.fields["code"].probabilities == pytest.approx(alone.fields["code"].probabilities, abs=1e-4)


@pytest.mark.model
def test_the_default_fit_reads_the_input_mean_and_a_refit_without_it_does_not(engine, fitted_review):
    info = fitted_review.fields["code"]
    assert "fused" in info.candidates
    if info.head == "fused" and info.readout == "fitted":
        assert info.mean_layers == (-8,) and len(info.fusion) == 4 and "code" in fitted_review.heads.input_mean
    else:
        assert info.mean_layers == () and not fitted_review.heads.input_mean
    bare = fit_heads(engine, REVIEW, coded_rows()[:24], significance=1.0, mean_layers=())
    assert bare.fields["code"].mean_layers == () and not bare.heads.input_mean
    assert bare.fields["code"].fusion is None or len(bare.fields["code"].fusion) == 3


def test_damaged_mean_members_are_refused(tmp_path):

    info = FieldHeadInfo(labels=("k1", "k2"), readout="fitted", head="fused", fusion=(1.0, 1.0, 0.1, 1.0),
                         layers=(-1,), mean_layers=(-8,))
    metadata = HeadsMetadata(rubric="review", rubric_fingerprint="x", model="m", prompt="p", fields={"code": info})
    lexicon = Lexicon(("w a", "w b"), torch.ones(2))
    ngram = {"code": NgramHead(torch.zeros(2, 2), torch.zeros(2))}
    hidden = {"code": FieldHead(torch.zeros(2, 6), torch.zeros(2), torch.zeros(6), torch.ones(6))}
    mean = {"code": FieldHead(torch.ones(2, 6), torch.zeros(2), torch.zeros(6), torch.ones(6))}
    good = Heads(metadata, hidden, ngram=ngram, lexicon=lexicon, input_mean=mean)
    loaded = Heads.load(good.save(tmp_path / "good.heads.safetensors"))
    assert loaded.fitted_fields == ["code"] and loaded.mean_layers == (-8,)
    three = metadata.model_copy(update={"fields": {"code": info.model_copy(update={"fusion": (1.0, 1.0, 0.1)})}})
    with pytest.raises(HeadsError, match="a fused head without its four finite weights"):
        Heads.load(Heads(three, hidden, ngram=ngram, lexicon=lexicon, input_mean=good.input_mean).save(tmp_path / "3.heads.safetensors"))
    with pytest.raises(HeadsError, match=r"field 'code' is marked fitted but its tensor 'code.input_mean.weight' is missing"):
        Heads.load(Heads(metadata, hidden, ngram=ngram, lexicon=lexicon).save(tmp_path / "none.heads.safetensors"))
    wide = {"code": FieldHead(torch.zeros(3, 6), torch.zeros(3), torch.zeros(6), torch.ones(6))}
    with pytest.raises(HeadsError, match="the input-mean head's tensors do not fit its 2 answers"):
        Heads.load(Heads(metadata, hidden, ngram=ngram, lexicon=lexicon, input_mean=wide).save(tmp_path / "w.heads.safetensors"))
    # The mean member's width is checked against the model as the hidden-state head's is: with two mean layers
    # of a 4-wide model and the 2 zero-shot log-probabilities it should read 10 features, and it reads 6.
    two_layers = metadata.model_copy(update={"rubric_fingerprint": rubric_fingerprint(REVIEW), "fields": {
        "code": info.model_copy(update={"mean_layers": (-8, -4)})}})
    twin = Heads(two_layers, hidden, ngram=ngram, lexicon=lexicon, input_mean=good.input_mean)
    with pytest.raises(HeadsError, match="the input-mean head of field 'code' reads 6 features; this model gives 10"):
        twin.check(REVIEW, model="m", prompt="p", hidden_size=4)
    Heads(metadata.model_copy(update={"rubric_fingerprint": rubric_fingerprint(REVIEW)}), hidden, ngram=ngram,
          lexicon=lexicon, input_mean=good.input_mean).check(REVIEW, model="m", prompt="p", hidden_size=4)


@pytest.mark.model
@pytest.mark.parametrize("path", ["decoder", "model-forward", "plain-forward"])
def test_every_backend_averages_the_pool_inside_the_pass_as_the_rows_it_would_hand_back(engine, tmp_path, path):
    """The pass averages each request's input rows as each layer is done (`forward.Pool`): the same means as
    the rows read out of the same pass and averaged after it, on the engine's decoder path (the bundled
    model), a tiny GPT-2 through its own forward and through the plain per-row reference; and the decoder
    path holds no input row of any layer past that layer."""
    from decisionflow.runtime.passes import forward
    from decisionflow.runtime.passes.forward import Pool

    if path == "decoder":
        owner = engine
    else:
        sys.path.insert(0, str(Path(__file__).parent))
        from tiny_models import build

        from decisionflow.runtime.engine import Engine
        from decisionflow.runtime.passes.model_forward import PlainForwardBackend

        owner = Engine.load(str(build("gpt2", tmp_path / "gpt2", engine.tokenizer)), dtype="float32", persist_prefixes=False)
        if path == "plain-forward":
            owner = Engine(owner.loaded, backend=PlainForwardBackend(owner.loaded.model))
    assert owner.backend.path == path
    compiled, _ = owner.compile(CHAINED)
    prepared = owner.prepared.get(CHAINED)
    owner.prepared.ensure_prefix(prepared)
    packed, rows, sizes, reads = PackedPass(), [], [], []
    for request, text in enumerate(TEXTS[:2]):
        last = -1
        tokens = compiled.request_tokens(text)
        for token in tokens:
            last = packed.add(token, parent=last, request=request)
            rows.append(last)
        sizes.append(len(tokens))
        reads.append(last)
    layers = (-2, -1)
    kept_rows: list[int] = []
    original_keep = forward.Capture.keep

    def watched_keep(self, index, hidden, pending):
        original_keep(self, index, hidden, pending)
        kept_rows.extend(len(kept) for kept in self.kept if kept is not None)

    forward.Capture.keep = watched_keep
    try:
        pooled = owner.backend.run_pass_with_features(prepared.prefix, [RequestContext(), RequestContext()], packed, reads,
                                                      pool=Pool(layers, rows, sizes))
    finally:
        forward.Capture.keep = original_keep
    assert kept_rows == []  # no input row kept past its layer (the forward backends never build a Capture)
    per_row = owner.backend.run_pass_with_features(prepared.prefix, [RequestContext(), RequestContext()], packed, reads,
                                                   layers, rows)
    expected = torch.stack([part.mean(dim=0) for part in torch.split(per_row.features, sizes)])
    assert pooled.features is None and pooled.means is not None and pooled.means.shape == expected.shape
    assert torch.allclose(pooled.means, expected, atol=1e-5), (pooled.means - expected).abs().max()
    assert torch.equal(pooled.logprobs, per_row.logprobs)
    assert not torch.allclose(pooled.means[0], pooled.means[1], atol=1e-2)  # each request its own rows
