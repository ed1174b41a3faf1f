"""What else a fused head could read or be: more hidden layers, the input's mean hidden state, a
nearest-neighbour vote, a discriminant, a perceptron, the n-gram head's strength, each measured against the
shipped fusion on the same rows.

Reads each set's train.csv and dev.csv once through the engine (`benchmarks.fitting.heads.measure.collect`: the
hidden states of many layers at the field's answer position, their mean over the input's positions, the
zero-shot readout), then builds members on the cached features, each scored out of fold (the fit's
stratified 5 folds, seed 0) and on dev.csv after a fit on every training row:

- `H:layers`: the shipped hidden-state head (`fitting.training.fit_path`, the zero-shot log-probabilities beside
  the hidden states) on those answer-position layers;
- `M:layers;mean-layers`: the same head on answer-position layers and input means;
- `K:layers`: a cosine nearest-neighbour vote (10 neighbours, softmax of similarity / 0.05) on the
  standardised answer-position states;
- `L:layers`: linear discriminant analysis (shared covariance, Ledoit-Wolf shrinkage) on the same features;
- `P:layers`: a one-hidden-layer perceptron (512 units, L2 1.0) on the same features;
- `W:C`: the shipped n-gram head (`fitting.lexical`) at inverse regularisation C;
- `Z`: the zero-shot readout.

A variant fuses its members with the fit's own `fitting.training.fit_fusion` (non-negative weights of the members'
temperature-scaled log-probabilities, fitted on the out-of-fold rows; the search starts where the fit's does,
the zero-shot readout at 0.1 and every other member at 1); its cross-validated accuracy, its dev accuracy and
McNemar's exact test on dev against the shipped default (the chooser's pick among hidden, n-gram and fused)
are reported. Each member's log-probabilities are cached beside the features, so a change to the fusion
re-runs in seconds:

    .venv/bin/python -m benchmarks.fitting.heads_members.measure --sets sst2,banking77,clinc150 --out results.json
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import SETS, dtype_of, labelled, write_results
from benchmarks.fitting.heads.measure import collect, layer_slices
from decisionflow.fitting.training import FUSION_START, fit_fusion, fused
from decisionflow.runtime.heads.fitted import ZERO_SHOT_FLOOR
from decisionflow.stats import fit_score_temperature, mcnemar_exact

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
ZERO_SHOT_START = FUSION_START[2]


def _features(data: dict, answer_layers: tuple[int, ...], mean_layers: tuple[int, ...] = ()) -> np.ndarray:
    """As the fit reads them: hidden states, then the zero-shot log-probabilities (floored as the fit floors them)."""
    zero_shot = torch.log(data["zero_shot"].clamp_min(ZERO_SHOT_FLOOR))
    parts = layer_slices(data["hidden"], answer_layers) + layer_slices(data["mean"], mean_layers)
    return torch.cat(parts + [zero_shot], 1).float().numpy()


def _layers(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x)


@functools.cache
def _word_matrices(name: str, labels: tuple[str, ...]) -> tuple[Any, Any]:
    """(train, dev) word vectors of a set's rows, as the fit builds them (its lexicon fitted on the training rows)."""
    from decisionflow.fitting.lexical import fit_lexicon, word_matrix
    from decisionflow.runtime.heads.lexical import lexical_text

    _, field, _ = SETS[name]
    texts = {split: [lexical_text(r.text) for r in labelled(name, split) if r.gold[field] in labels]
             for split in ("train", "dev")}
    lexicon = fit_lexicon(texts["train"])
    return word_matrix(lexicon, texts["train"]), word_matrix(lexicon, texts["dev"])


def _head_scores(train_x, gold, test_x, labels: int) -> np.ndarray:
    from decisionflow.fitting.training import REGULARISATION_GRID, fit_path

    path = fit_path(train_x, gold, REGULARISATION_GRID)
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


def cached_member(cache: Path, key: str, name: str, train: dict, dev: dict, folded,
                  gold: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`member`, kept under `cache` (the features it reads are cached there too)."""
    path = cache / "members" / f"{name}-{key.replace(':', '_').replace(';', '_')}.npz"
    if path.is_file():
        stored = np.load(path)
        return stored["held_out"], stored["dev"]
    held_out, on_dev = member(key, name, train, dev, folded, gold)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, held_out=held_out, dev=on_dev)
    return held_out, on_dev


def member(key: str, name: str, train: dict, dev: dict, folded, gold: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(out-of-fold, dev) log-probabilities of one member, temperature-scaled on its out-of-fold rows."""
    from scipy.special import log_softmax

    from decisionflow.fitting.lexical import fit_words

    labels = len(train["labels"])
    kind, _, argument = key.partition(":")
    if kind == "Z":
        return (torch.log(train["zero_shot"].clamp_min(ZERO_SHOT_FLOOR)).double().numpy(),
                torch.log(dev["zero_shot"].clamp_min(ZERO_SHOT_FLOOR)).double().numpy())
    held_out = np.full((len(gold), labels), -np.inf)
    if kind == "W":
        words, dev_words = _word_matrices(name, tuple(train["labels"]))
        if words.shape[0] != len(gold) or dev_words.shape[0] != len(dev["gold"]):
            raise SystemExit(f"{name}: the cached rows do not match the data files; clear the cache")
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
    temperature = fit_score_temperature(held_out, gold)
    return log_softmax(held_out / temperature, axis=1), log_softmax(on_dev / temperature, axis=1)


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
                    members[key] = cached_member(cache, key, name, train, dev, folded, gold)
            parts = [members[key] for key in variant]
            weights = (fit_fusion([p[0] for p in parts], gold, start=[ZERO_SHOT_START if key == "Z" else 1.0 for key in variant])
                       if len(parts) > 1 else (1.0,))
            held_out, on_dev = fused(weights, *[p[0] for p in parts]), fused(weights, *[p[1] for p in parts])
            figures["+".join(variant)] = {
                "weights": [round(w, 3) for w in weights], "cv": float((held_out.argmax(1) == gold).mean()),
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
        only, only_default = int((right & ~reference).sum()), int((~right & reference).sum())
        p = mcnemar_exact(only, only_default)
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
    write_results(args.out, {"sets": results}, conditions={"dtype": dtype_of(engine)})


if __name__ == "__main__":
    sys.exit(main())
