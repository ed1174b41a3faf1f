"""What else a fused head could read or be: more hidden layers, the input's mean hidden state, a
nearest-neighbour vote, a discriminant, a perceptron, the n-gram head's strength, each measured against the
shipped fusion on the same rows.

Reads each set's train.csv and dev.csv once through the engine (`benchmarks.heads.measure.collect`: the
hidden states of many layers at the field's answer position, their mean over the input's positions, the
zero-shot readout), then builds members on the cached features, each scored out of fold (the fit's
stratified 5 folds, seed 0) and on dev.csv after a fit on every training row:

- `H:layers`: the shipped hidden-state head (`head_fit._fit_path`, the zero-shot log-probabilities beside
  the hidden states) on those answer-position layers;
- `M:layers;mean-layers`: the same head on answer-position layers and input means;
- `K:layers`: a cosine nearest-neighbour vote (10 neighbours, softmax of similarity / 0.05) on the
  standardised answer-position states;
- `L:layers`: linear discriminant analysis (shared covariance, Ledoit-Wolf shrinkage) on the same features;
- `P:layers`: a one-hidden-layer perceptron (512 units, L2 1.0) on the same features;
- `W:C`: the shipped n-gram head (`fitting.lexical`) at inverse regularisation C;
- `Z`: the zero-shot readout.

A variant fuses its members as the fit does (`head_fit._fusion`'s rule: non-negative weights of the members'
temperature-scaled log-probabilities, fitted on the out-of-fold rows); its cross-validated accuracy, its dev
accuracy and McNemar's exact test on dev against the shipped default (the chooser's pick among hidden, n-gram
and fused) are reported:

    .venv/bin/python -m benchmarks.heads_members.measure --sets sst2,banking77,clinc150 --out results.json
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import DATA, SETS, read_csv, write_results
from benchmarks.heads.measure import LAYERS, collect

SHIPPED = ("H:-1,-8", "W:10", "Z")
VARIANTS = (
    ("H:-1,-8",),
    ("W:10",),
    SHIPPED,
    ("H:-1,-4,-8", "W:10", "Z"),
    ("H:-1,-4,-8,-12", "W:10", "Z"),
    ("H:-1,-4,-8,-12,-16", "W:10", "Z"),
    ("H:-1,-2,-4,-6,-8,-10,-12", "W:10", "Z"),
    ("H:-1,-8", "H:-4", "H:-12", "W:10", "Z"),
    ("H:-1,-8", "W:3", "Z"),
    ("H:-1,-8", "W:30", "Z"),
    ("K:-1,-8",),
    ("H:-1,-8", "W:10", "Z", "K:-1,-8"),
    ("L:-1,-8",),
    ("H:-1,-8", "W:10", "Z", "L:-1,-8"),
    ("P:-1,-8",),
    ("H:-1,-8", "W:10", "Z", "P:-1,-8"),
    ("P:-1,-8", "W:10", "Z"),
    ("M:;-8",),
    ("M:-1,-8;-8",),
    ("M:-1,-8;-4,-12",),
    ("H:-1,-8", "W:10", "Z", "M:;-8"),
    ("M:-1,-8;-8", "W:10", "Z"),
)
NEIGHBOURS, SIMILARITY_SCALE = 10, 0.05


def _slices(block: torch.Tensor, layers: tuple[int, ...]) -> list[torch.Tensor]:
    size = block.shape[1] // len(LAYERS)
    return [block[:, LAYERS.index(layer) * size:(LAYERS.index(layer) + 1) * size] for layer in layers]


def _features(data: dict, answer_layers: tuple[int, ...], mean_layers: tuple[int, ...] = ()) -> np.ndarray:
    """As the fit reads them: hidden states, then the zero-shot log-probabilities (floored as the fit floors them)."""
    zero_shot = torch.log(data["zero_shot"].clamp_min(1e-6))
    parts = _slices(data["hidden"], answer_layers) + _slices(data["mean"], mean_layers)
    return torch.cat(parts + [zero_shot], 1).float().numpy()


def _layers(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x)


def _texts(name: str, split: str, labels: list[str]) -> list[str]:
    from decisionflow.runtime.lexical import lexical_text

    _, _, column = SETS[name]
    return [lexical_text(r["text"]) for r in read_csv(DATA / name / f"{split}.csv") if r[column] in labels]


def _head_scores(train_x, gold, test_x, labels: int) -> np.ndarray:
    from decisionflow.fitting.head_fit import REGULARISATION_GRID, _fit_path

    path = _fit_path(train_x, gold, REGULARISATION_GRID)
    out = np.full((len(test_x), labels), -np.inf)
    out[:, path.classes] = path.scores(test_x)
    return out


def _neighbour_scores(train_x, gold, test_x, labels: int) -> np.ndarray:
    centre, scale = train_x.mean(0), train_x.std(0) + 1e-6
    a, b = (train_x - centre) / scale, (test_x - centre) / scale
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    similarity = b @ a.T
    nearest = np.argsort(-similarity, axis=1)[:, :NEIGHBOURS]
    votes = np.full((len(b), labels), 1e-4)
    for i, row in enumerate(nearest):
        for j in row:
            votes[i, gold[j]] += math.exp(similarity[i, j] / SIMILARITY_SCALE)
    return np.log(votes / votes.sum(1, keepdims=True))


def _discriminant_scores(train_x, gold, test_x, labels: int) -> np.ndarray:
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(train_x)
    model = LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto").fit(scaler.transform(train_x), gold)
    out = np.full((len(test_x), labels), -np.inf)
    scores = model.decision_function(scaler.transform(test_x))
    if scores.ndim == 1:  # two answers: one score, as two whose softmax is its sigmoid
        scores = np.stack([-scores / 2, scores / 2], axis=1)
    out[:, model.classes_] = scores
    return out


def _perceptron_scores(train_x, gold, test_x, labels: int) -> np.ndarray:
    from sklearn.neural_network import MLPClassifier
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(train_x)
    model = MLPClassifier((512,), alpha=1.0, max_iter=300, random_state=0).fit(scaler.transform(train_x), gold)
    out = np.full((len(test_x), labels), -np.inf)
    out[:, model.classes_] = np.log(np.clip(model.predict_proba(scaler.transform(test_x)), 1e-9, 1.0))
    return out


def member(key: str, name: str, train: dict, dev: dict, folded, gold: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(out-of-fold, dev) log-probabilities of one member, temperature-scaled on its out-of-fold rows."""
    from scipy.special import log_softmax

    from decisionflow.fitting.head_fit import _temperature
    from decisionflow.fitting.lexical import fit_lexicon, fit_words, word_matrix

    labels = len(train["labels"])
    kind, _, argument = key.partition(":")
    if kind == "Z":
        return (torch.log(train["zero_shot"].clamp_min(1e-6)).double().numpy(),
                torch.log(dev["zero_shot"].clamp_min(1e-6)).double().numpy())
    held_out = np.full((len(gold), labels), -np.inf)
    if kind == "W":
        texts, dev_texts = _texts(name, "train", train["labels"]), _texts(name, "dev", train["labels"])
        if len(texts) != len(gold) or len(dev_texts) != len(dev["gold"]):
            raise SystemExit(f"{name}: the cached rows do not match the data files; clear the cache")
        lexicon = fit_lexicon(texts)
        words, dev_words = word_matrix(lexicon, texts), word_matrix(lexicon, dev_texts)
        c = float(argument)
        for fit_rows, test_rows in folded:
            regression = fit_words(words[fit_rows], gold[fit_rows], c=c)
            held_out[np.ix_(test_rows, regression.classes)] = regression.scores(words[test_rows])
        regression = fit_words(words, gold, c=c)
        on_dev = np.full((dev_words.shape[0], labels), -np.inf)
        on_dev[:, regression.classes] = regression.scores(dev_words)
    else:
        answer_layers, _, mean_layers = argument.partition(";")
        x = _features(train, _layers(answer_layers), _layers(mean_layers))
        x_dev = _features(dev, _layers(answer_layers), _layers(mean_layers))
        score = {"K": _neighbour_scores, "L": _discriminant_scores, "P": _perceptron_scores}.get(kind, _head_scores)
        for fit_rows, test_rows in folded:
            held_out[test_rows] = score(x[fit_rows], gold[fit_rows], x[test_rows], labels)
        on_dev = score(x, gold, x_dev, labels)
    temperature = _temperature(held_out, gold)
    return log_softmax(held_out / temperature, axis=1), log_softmax(on_dev / temperature, axis=1)


def fuse(parts: list[np.ndarray], gold: np.ndarray) -> np.ndarray:
    """Non-negative weights of the members' log-probabilities with the lowest out-of-fold log-loss (the
    fit's rule, for any number of members)."""
    from scipy.optimize import minimize
    from scipy.special import log_softmax

    rows = np.arange(len(gold))
    finite = np.all([np.isfinite(p[rows, gold]) for p in parts], axis=0)
    kept = [p[finite] for p in parts]

    def loss(weights: np.ndarray) -> float:
        combined = combine(np.abs(weights), kept)
        return float(-log_softmax(combined, axis=1)[np.arange(int(finite.sum())), gold[finite]].mean())

    found = minimize(loss, np.ones(len(parts)), method="Nelder-Mead",
                     options={"maxiter": 400 * len(parts), "xatol": 1e-4})
    return np.abs(found.x)


def combine(weights, parts: list[np.ndarray]) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        total = sum(w * p for w, p in zip(weights, parts))
    return np.nan_to_num(total, nan=-np.inf)


def mcnemar(right: np.ndarray, other: np.ndarray) -> tuple[int, int, float]:
    from scipy.stats import binomtest

    only, only_other = int((right & ~other).sum()), int((~right & other).sum())
    return only, only_other, (binomtest(only, only + only_other).pvalue if only + only_other else 1.0)


def study(name: str, engine: Any, cache: Path) -> dict:
    from sklearn.model_selection import StratifiedKFold
    from threadpoolctl import threadpool_limits

    train, dev = collect(engine, name, "train", cache), collect(engine, name, "dev", cache)
    gold, dev_gold = train["gold"].numpy(), dev["gold"].numpy()
    folded = list(StratifiedKFold(5, shuffle=True, random_state=0).split(np.zeros(len(gold)), gold))
    members: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    figures: dict[str, dict] = {}
    with warnings.catch_warnings(), threadpool_limits(1):
        warnings.simplefilter("ignore")
        for variant in VARIANTS:
            began = time.perf_counter()
            for key in variant:
                if key not in members:
                    members[key] = member(key, name, train, dev, folded, gold)
            parts = [members[key] for key in variant]
            weights = fuse([p[0] for p in parts], gold) if len(parts) > 1 else np.ones(1)
            held_out, on_dev = combine(weights, [p[0] for p in parts]), combine(weights, [p[1] for p in parts])
            figures["+".join(variant)] = {
                "weights": np.round(weights, 3).tolist(), "cv": float((held_out.argmax(1) == gold).mean()),
                "dev_right": (on_dev.argmax(1) == dev_gold).tolist(), "seconds": time.perf_counter() - began,
            }
    # The shipped default: the chooser's pick (best cross-validated accuracy) of hidden, n-gram and fused.
    shipped = max(("H:-1,-8", "W:10", "+".join(SHIPPED)), key=lambda key: figures[key]["cv"])
    reference = np.asarray(figures[shipped]["dev_right"])
    print(f"\n{name}: {len(gold)} train rows, {len(dev_gold)} dev rows; shipped default answers with {shipped}\n"
          "| variant | weights | CV accuracy | dev accuracy | dev rows only it / only the default right | McNemar p |\n"
          "| --- | --- | ---: | ---: | ---: | ---: |")
    for key, figure in figures.items():
        right = np.asarray(figure.pop("dev_right"))
        only, only_default, p = mcnemar(right, reference)
        figure.update(dev=float(right.mean()), dev_correct=int(right.sum()), only_it=only, only_default=only_default,
                      p_vs_default=p)
        print(f"| {key} | {figure['weights']} | {figure['cv']:.4f} | {figure['dev']:.4f} ({figure['dev_correct']}) "
              f"| {only} / {only_default} | {p:.2g} |", flush=True)
    return {"train_rows": len(gold), "dev_rows": len(dev_gold), "default": shipped, "variants": figures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="sst2,banking77,clinc150")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/decisionflow-heads-members"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from decisionflow.runtime.engine import Engine

    args.cache.mkdir(parents=True, exist_ok=True)
    engine = Engine.load()
    results = {name: study(name, engine, args.cache) for name in args.sets.split(",")}
    write_results(args.out, {"sets": results})


if __name__ == "__main__":
    sys.exit(main())
