"""Fitted heads on the development sets: which features, which regularisation, the learning curve.

Reads each set's train.csv and dev.csv once through the engine (the rubric's own packed passes, gold
parents written in for the training rows), keeping the hidden states of many layers at the field's
answer position, the mean over the input's own positions, and the zero-shot readout; caches them
under --cache; then fits heads on k rows per label (or every training row) and scores dev.csv:

    .venv/bin/python -m benchmarks.fitting.heads.measure --sets banking77,clinc150,sst2 --study layers
    .venv/bin/python -m benchmarks.fitting.heads.measure --sets banking77,clinc150,sst2,nlbse24_issues --study curve

`--study layers` compares feature sets on every training row; `--study curve` runs the shipped
`fit_field` (the chooser included) at k = 2, 5, 10, 20 per label and on every row; `--study overhead`
times requests with and without fitted heads, interleaved in one run. Results go to
stdout as Markdown and to --out as JSON.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from benchmarks.common import ROOT, SETS, dtype_of, interleaved_medians, labelled, subsample, write_results
from decisionflow.fitting import fit_heads
from decisionflow.runtime.heads.fitted import DEFAULT_LAYERS, ZERO_SHOT_FLOOR

LAYERS = (-1, -2, -4, -6, -8, -10, -12, -16, -20)


def collect(engine, name: str, split: str, cache: Path, *, with_means: bool = True) -> dict:
    """Per row: hidden states at LAYERS, the input mean at LAYERS, zero-shot distribution, gold."""
    from decisionflow.runtime.passes.backend import PackedPass, RequestContext
    from decisionflow.spec import load_rubric

    path = cache / f"{name}-{split}.pt"
    if path.is_file():
        return torch.load(path)
    rubric_path, field, _ = SETS[name]
    rubric = load_rubric(ROOT / rubric_path)
    labels = rubric.fields[field].labels
    rows = [r for r in labelled(name, split) if r.gold[field] in labels]
    texts = [r.text for r in rows]
    forced = [{field: r.gold[field]} for r in rows] if split == "train" else None
    began = time.perf_counter()
    outcomes, captured = engine.read_features(rubric, texts, layers=LAYERS, write=forced)
    read_s = time.perf_counter() - began
    compiled, _ = engine.compile(rubric)
    prepared = engine.prepared.get(rubric)
    means = []
    for text in texts if with_means else ():
        tokens = compiled.request_tokens(text)
        packed, last = PackedPass(), -1
        for token in tokens:
            last = packed.add(token, parent=last, request=0)
        features = engine.backend.run_pass_with_features(prepared.prefix, [RequestContext()], packed, [last], LAYERS,
                                                         list(range(len(tokens)))).features
        means.append(features.mean(dim=0))
    keep = [i for i, c in enumerate(captured) if c is not None and field in c]
    data = {
        "labels": list(labels),
        "hidden": torch.stack([captured[i][field].features for i in keep]),
        "mean": torch.stack([means[i] for i in keep]) if means else torch.zeros(len(keep), 0),
        "zero_shot": torch.tensor([[dict(zip(captured[i][field].offered, captured[i][field].zero_shot)).get(j, 0.0)
                                    for j in range(len(labels))] for i in keep]),
        "gold": torch.tensor([labels.index(rows[i].gold[field]) for i in keep]),
        "read_s": read_s,
        "errors": sum(1 for o in outcomes if not hasattr(o, "fields")),
    }
    torch.save(data, path)
    return data


def layer_slices(block: torch.Tensor, layers: tuple[int, ...]) -> list[torch.Tensor]:
    """The columns of `layers` in a cached block (`hidden` or `mean`: every layer of LAYERS side by side)."""
    size = block.shape[1] // len(LAYERS)
    return [block[:, LAYERS.index(layer) * size:(LAYERS.index(layer) + 1) * size] for layer in layers]


def features_of(data: dict, layers: tuple[int, ...], *, mean: bool, zero_shot: bool) -> torch.Tensor:
    parts = layer_slices(data["hidden"], layers)
    if mean:
        parts += layer_slices(data["mean"], layers)
    if zero_shot:
        parts.append(torch.log(data["zero_shot"].clamp_min(ZERO_SHOT_FLOOR)))
    return torch.cat(parts, dim=1)


def fit_and_score(x_train, y_train, x_dev, y_dev, c: float) -> float:
    model = _model(c)
    model.fit(x_train.double().numpy(), y_train.numpy())
    return float((model.predict(x_dev.double().numpy()) == y_dev.numpy()).mean())


def _model(c: float):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=300))


def study_layers(train: dict, dev: dict) -> list[dict]:
    """Per layer choice (with the zero-shot log-probabilities; `-1,-8` also with the input's mean): the
    training rows' 5-fold cross-validated accuracy at the best C of 0.003/0.01/0.03, and dev accuracy
    when fitted on every training row at C = 0.01."""
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    from decisionflow.fitting.choosing import MAX_FOLDS

    configs = [((-1,), False), ((-1, -4), False), ((-1, -8), False), ((-4, -8), False), ((-1, -4, -8), False),
               ((-1, -4, -8, -12), False), ((-1, -8), True)]
    out = []
    for layers, mean in configs:
        x_train = features_of(train, layers, mean=mean, zero_shot=True)
        cv = StratifiedKFold(n_splits=MAX_FOLDS, shuffle=True, random_state=0)
        best = max(
            float((cross_val_predict(_model(c), x_train.double().numpy(), train["gold"].numpy(), cv=cv)
                   == train["gold"].numpy()).mean())
            for c in (0.003, 0.01, 0.03)
        )
        dev_accuracy = fit_and_score(x_train, train["gold"], features_of(dev, layers, mean=mean, zero_shot=True),
                                     dev["gold"], 0.01)
        out.append({"layers": list(layers), "input_mean": mean, "cv": best, "dev": dev_accuracy})
        print(f"| {layers}{' + input mean' if mean else ''} | {best:.3f} | {dev_accuracy:.3f} |", flush=True)
    return out


def study_curve(name: str, train: dict, dev: dict, layers: tuple[int, ...], mean: bool, ks) -> list[dict]:
    from sklearn.metrics import f1_score

    from decisionflow.fitting.choosing import MAX_FOLDS, fit_field
    from decisionflow.fitting.features import FieldData
    from decisionflow.fitting.training import REGULARISATION_GRID
    from decisionflow.spec import load_rubric
    from decisionflow.stats import expected_calibration_error, mcnemar_exact

    rubric_path, field, _ = SETS[name]
    rubric = load_rubric(ROOT / rubric_path)
    zero_shot_dev = float((dev["zero_shot"].argmax(dim=1) == dev["gold"]).float().mean())
    out = []
    for k in ks:
        chosen = subsample(train["gold"], k)
        data = FieldData()
        for i in chosen:
            hidden = features_of({"hidden": train["hidden"][i:i + 1], "mean": train["mean"][i:i + 1],
                                  "zero_shot": train["zero_shot"][i:i + 1]}, layers, mean=mean, zero_shot=False)[0]
            data.hidden.append(hidden)
            data.zero_shot.append(torch.log(train["zero_shot"][i].clamp_min(ZERO_SHOT_FLOOR)))
            data.gold.append(int(train["gold"][i]))
            data.zero_shot_answer.append(int(train["zero_shot"][i].argmax()))
        began = time.perf_counter()
        info, fitted, _ = fit_field(rubric, field, data, layers=layers, zero_shot_features=True, min_rows_per_label=2,
                                  regularisation=REGULARISATION_GRID, folds=MAX_FOLDS, seed=0)
        head = fitted.hidden
        fit_s = time.perf_counter() - began
        if head is not None:
            x_dev = features_of(dev, layers, mean=mean, zero_shot=False)
            predicted, confidence = [], []
            for i in range(len(dev["gold"])):
                z = torch.log(dev["zero_shot"][i].clamp_min(ZERO_SHOT_FLOOR))
                p = head.probabilities(x_dev[i], z, range(len(info.labels)))
                predicted.append(max(range(len(p)), key=p.__getitem__))
                confidence.append(max(p))
            predicted = torch.tensor(predicted)
        else:
            predicted = dev["zero_shot"].argmax(dim=1)
            confidence = dev["zero_shot"].max(dim=1).values.tolist()
        ece = expected_calibration_error(confidence, (predicted == dev["gold"]).tolist())
        accuracy = float((predicted == dev["gold"]).float().mean())
        macro_f1 = float(f1_score(dev["gold"].numpy(), predicted.numpy(), average="macro"))
        zero_shot_f1 = float(f1_score(dev["gold"].numpy(), dev["zero_shot"].argmax(dim=1).numpy(), average="macro"))
        right, zero_right = predicted == dev["gold"], dev["zero_shot"].argmax(dim=1) == dev["gold"]
        p = mcnemar_exact(int((right & ~zero_right).sum()), int((zero_right & ~right).sum()))
        row = {"set": name, "k": k or "all", "rows": len(chosen), "readout": info.readout, "C": info.regularisation,
               "cv": {c: v.accuracy for c, v in info.candidates.items()}, "dev": accuracy, "zero_shot_dev": zero_shot_dev,
               "dev_macro_f1": macro_f1, "zero_shot_dev_macro_f1": zero_shot_f1, "mcnemar_p": p, "fit_s": round(fit_s, 1),
               "dev_ece": ece, "dev_predicted": predicted.tolist()}
        print(f"| {name} | {k or 'all'} | {len(chosen)} | {info.readout} | "
              + " | ".join(f"{info.candidates[c].accuracy:.3f}" if c in info.candidates else "-" for c in ("zero_shot", "fitted"))
              + f" | {zero_shot_dev:.3f} | {accuracy:.3f} | {p:.2g} | {zero_shot_f1:.3f} | {macro_f1:.3f} | {ece:.3f} | {fit_s:.1f} |",
              flush=True)
        out.append(row)
    return out


def study_overhead(engine, name: str, repeats: int = 5, requests: int = 40) -> dict:
    """Per-request latency with and without fitted heads, interleaved in one run (same texts, same engine)."""
    from decisionflow.spec import load_rubric

    rubric_path, field, _ = SETS[name]
    rubric = load_rubric(ROOT / rubric_path)
    labels = rubric.fields[field].labels
    train = [r for r in labelled(name, "train") if r.gold[field] in labels]
    rows = [train[i] for i in subsample(torch.tensor([labels.index(r.gold[field]) for r in train]), 5)]
    fit = fit_heads(engine, rubric, [(r.text, {field: r.gold[field]}) for r in rows], significance=1.0)
    heads = fit.heads
    texts = [r.text for r in labelled(name, "dev")[:requests]]
    medians, decision = interleaved_medians(engine, rubric, texts, {"zero_shot": None, "fitted": heads}, repeats)
    assert not heads.fitted_fields or decision.fields[field].method != "zero_shot", "the fitted head did not answer"
    ratio = medians["fitted"] / medians["zero_shot"]
    print(f"| {name} | {len(texts)} x {repeats} | {medians['zero_shot']:.1f} | {medians['fitted']:.1f} | {ratio:.3f} |",
          flush=True)
    return {"set": name, "requests": len(texts), "repeats": repeats, "median_ms": medians, "ratio": ratio}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default="banking77,clinc150,sst2")
    parser.add_argument("--study", choices=("layers", "curve", "collect", "overhead"), default="curve")
    parser.add_argument("--layers", default=",".join(map(str, DEFAULT_LAYERS)))
    parser.add_argument("--input-mean", action="store_true")
    parser.add_argument("--ks", default="2,5,10,20,all")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/decisionflow-heads-study"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from decisionflow.runtime.engine import Engine

    args.cache.mkdir(parents=True, exist_ok=True)
    engine = Engine.load()
    results = {}
    if args.study == "overhead":
        print("| set | requests | median ms, zero-shot | median ms, fitted head | ratio |\n| --- | --- | --- | --- | --- |")
        results = {name: study_overhead(engine, name) for name in args.sets.split(",")}
        write_results(args.out, results, conditions={"dtype": dtype_of(engine)})
        return
    for name in args.sets.split(","):
        means = args.study == "layers"
        train = collect(engine, name, "train", args.cache, with_means=means)
        dev = collect(engine, name, "dev", args.cache, with_means=means)
        print(f"\n{name}: {len(train['gold'])} train rows (read in {train['read_s']:.0f} s), {len(dev['gold'])} dev rows",
              flush=True)
        if args.study == "layers":
            print("| layers | cross-validated accuracy (train) | dev accuracy (C = 0.01) |\n| --- | --- | --- |")
            results[name] = study_layers(train, dev)
        elif args.study == "curve":
            print("| set | k per label | rows | kept | CV zero-shot | CV fitted | dev zero-shot | dev as fitted | McNemar p "
                  "| dev macro-F1 zero-shot | dev macro-F1 as fitted | dev ECE as fitted | fit s |\n"
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
            ks = [None if k == "all" else int(k) for k in args.ks.split(",")]
            layers = tuple(int(x) for x in args.layers.split(","))
            results[name] = study_curve(name, train, dev, layers, args.input_mean, ks)
    write_results(args.out, results, conditions={"dtype": dtype_of(engine)})


if __name__ == "__main__":
    sys.exit(main())
