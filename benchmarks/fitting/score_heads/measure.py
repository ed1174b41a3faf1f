"""A score field's heads: the ordinal head against the multinomial one, on human-rated sentiment scores.

The data: the four sets of human sentiment ratings published with VADER (Hutto & Gilbert, ICWSM 2014;
MIT licence): tweets, Amazon review snippets, movie review snippets and New York Times editorial
snippets, each text rated by 20 people from -4 to 4. Its score is the mean rating rounded to a level
and shifted to 0..8. The files ship in the `vaderSentiment` source distribution on PyPI, which this
script downloads (or reads from --source, the unpacked `hutto_ICWSM_2014` folder). Each set is
shuffled (seed 0): 400 rows for dev, the next 2,000 for training.

Rows are read once through the engine (the rubric below, its own packed passes) and cached under
--cache; then, per set and number of training rows n (the first n of the shuffled training rows),
heads are fitted and scored on dev:

- `zero_shot`: the engine's readout;
- `multinomial`: the multinomial head alone (the averaged path and its temperature), fitted on the
  levels that have rows (the engine itself fits it only where every level has two rows or more);
- `ordinal`: the ordinal head alone;
- `as chosen`: what `fit_field` keeps (the cross-validated better head, or zero-shot).

    .venv/bin/python -m benchmarks.fitting.score_heads.measure --out benchmarks/fitting/score_heads/results.json

Accuracy is exact agreement with the gold level; MAE the mean distance in levels. Paired tests
between the two heads on the same dev rows: McNemar's exact test on right/wrong, and Wilcoxon's
signed-rank test on the absolute errors.
"""

from __future__ import annotations

import argparse
import math
import random
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import dtype_of, write_results

ROOT = Path(__file__).resolve().parents[2]
SOURCE_PACKAGE = "vaderSentiment==3.3.2"
SETS = {
    "tweets": "tweets_GroundTruth.txt",
    "amazon": "amazonReviewSnippets_GroundTruth.txt",
    "movies": "movieReviewSnippets_GroundTruth.txt",
    "nyt": "nytEditorialSnippets_GroundTruth.txt",
}
DEV_ROWS, TRAIN_ROWS = 400, 2000
RUBRIC = """\
name: rated_sentiment
instructions: Rate the sentiment of one short text.
fields:
  score:
    kind: score
    question: How negative or positive the text is, 0 (extremely negative) to 8 (extremely positive), 4 neutral
    min: 0
    max: 8
"""


def ratings_folder(source: Path | None, cache: Path) -> Path:
    """The unpacked `hutto_ICWSM_2014` folder: --source, else downloaded from PyPI into the cache."""
    if source is not None:
        return source
    folder = cache / "hutto_ICWSM_2014"
    if folder.is_dir():
        return folder
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                        SOURCE_PACKAGE, "-d", scratch], check=True, capture_output=True)
        [archive] = Path(scratch).glob("vaderSentiment-*.tar.gz")
        with tarfile.open(archive) as outer:
            member = next(m for m in outer.getmembers() if m.name.endswith("additional_resources/hutto_ICWSM_2014.tar.gz"))
            inner = outer.extractfile(member)
            with tarfile.open(fileobj=inner) as ratings:
                ratings.extractall(cache, filter="data")
    return folder


def split_rows(folder: Path, name: str) -> dict[str, list[dict[str, str]]]:
    rows = []
    for line in (folder / SETS[name]).read_text(encoding="utf-8", errors="replace").split("\n"):
        parts = line.split("\t")
        if len(parts) < 3 or not parts[2].strip():
            continue
        rows.append({"text": parts[2].strip().lstrip("\ufeff"), "score": str(math.floor(float(parts[1]) + 0.5) + 4)})
    random.Random(0).shuffle(rows)
    return {"dev": rows[:DEV_ROWS], "train": rows[DEV_ROWS:DEV_ROWS + TRAIN_ROWS]}


def collect(engine, rubric, rows: list[dict[str, str]], path: Path) -> dict:
    """Per row: the default layers' hidden states at the score's answer position, zero-shot, gold."""
    from decisionflow.runtime.heads.fitted import DEFAULT_LAYERS

    if path.is_file():
        return torch.load(path)
    labels = rubric.fields["score"].labels
    began = time.perf_counter()
    _, captured = engine.read_features(rubric, [r["text"] for r in rows], layers=DEFAULT_LAYERS)
    keep = [i for i, c in enumerate(captured) if c is not None and "score" in c]
    data = {
        "hidden": torch.stack([captured[i]["score"].features for i in keep]),
        "zero_shot": [captured[i]["score"].zero_shot for i in keep],
        "offered": [captured[i]["score"].offered for i in keep],
        "gold": [labels.index(rows[i]["score"]) for i in keep],
        "read_s": time.perf_counter() - began,
    }
    torch.save(data, path)
    return data


def field_data(data: dict, rows: list[int], label_count: int):
    from decisionflow.fitting.features import FieldData
    from decisionflow.runtime.heads.fitted import zero_shot_features

    out = FieldData()
    for i in rows:
        out.hidden.append(data["hidden"][i])
        out.zero_shot.append(zero_shot_features(data["zero_shot"][i], data["offered"][i], label_count))
        out.gold.append(data["gold"][i])
        best = max(range(len(data["zero_shot"][i])), key=data["zero_shot"][i].__getitem__)
        out.zero_shot_answer.append(data["offered"][i][best])
    return out


def features(data) -> np.ndarray:
    return torch.cat([torch.stack(data.hidden), torch.stack(data.zero_shot)], dim=1).float().numpy()


def heads_alone(train, values: np.ndarray):
    """The multinomial and the ordinal head, each fitted as `fit_field` would fit it if chosen."""
    from sklearn.model_selection import KFold

    from decisionflow.fitting import choosing, training
    from decisionflow.stats import fit_score_temperature

    x, gold = features(train), np.asarray(train.gold)
    folds = list(KFold(n_splits=choosing.MAX_FOLDS, shuffle=True, random_state=0).split(x))
    held = np.full((len(gold), len(values)), -np.inf)
    predicted = np.zeros(len(gold))
    for fit_rows, test in folds:
        path = training.fit_path(x[fit_rows], gold[fit_rows], training.REGULARISATION_GRID)
        held[np.ix_(test, path.classes)] = path.scores(x[test])
        predicted[test] = training.fit_ordinal(x[fit_rows], values[gold[fit_rows]]).predict(x[test])
    path = training.fit_path(x, gold, training.REGULARISATION_GRID)
    multinomial = path.head(fit_score_temperature(held[:, path.classes], np.searchsorted(path.classes, gold)))
    if len(path.classes) < len(values):  # levels without rows: never answered
        weight = torch.zeros(len(values), multinomial.weight.shape[1])
        bias = torch.full((len(values),), -1e4)
        weight[torch.as_tensor(path.classes)] = multinomial.weight
        bias[torch.as_tensor(path.classes)] = multinomial.bias
        multinomial.weight, multinomial.bias = weight, bias
    ordinal = training.fit_ordinal(x, values[gold]).head(values, training.fit_spread(predicted, gold, values))
    return multinomial, ordinal


def score(head, dev, values: np.ndarray) -> dict:
    x = torch.as_tensor(features(dev))
    logits = ((x - head.mean) / head.scale) @ head.weight.T + head.bias
    probabilities = torch.softmax(logits.double(), dim=1).numpy()
    return answers_figures(probabilities.argmax(axis=1), probabilities, dev.gold, values)


def answers_figures(answers, probabilities, gold, values: np.ndarray) -> dict:
    gold = np.asarray(gold)
    rows = np.arange(len(gold))
    return {
        "accuracy": float((answers == gold).mean()),
        "mae": float(np.abs(values[answers] - values[gold]).mean()),
        "within_one": float((np.abs(values[answers] - values[gold]) <= 1).mean()),
        "log_loss": float(-np.log(np.clip(probabilities[rows, gold], 1e-12, 1)).mean()),
        "answers": answers.tolist(),
    }


def paired(a: dict, b: dict, gold, values: np.ndarray) -> dict:
    from scipy.stats import wilcoxon

    from decisionflow.stats import mcnemar_exact

    gold = np.asarray(gold)
    right_a, right_b = np.asarray(a["answers"]) == gold, np.asarray(b["answers"]) == gold
    wins, losses = int((right_b & ~right_a).sum()), int((right_a & ~right_b).sum())
    error_a = np.abs(values[np.asarray(a["answers"])] - values[gold])
    error_b = np.abs(values[np.asarray(b["answers"])] - values[gold])
    differs = error_a != error_b
    return {
        "mcnemar_p": mcnemar_exact(wins, losses),
        "ordinal_right_only": wins, "multinomial_right_only": losses,
        "wilcoxon_p": float(wilcoxon(error_a[differs], error_b[differs]).pvalue) if differs.any() else 1.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--rows", default="30,100,300,1000,2000", help="training rows per fit")
    parser.add_argument("--source", type=Path, help="the unpacked hutto_ICWSM_2014 folder (default: download)")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "decisionflow-score-heads")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from decisionflow import Engine
    from decisionflow.fitting.choosing import MIN_ROWS_PER_LABEL, fit_field
    from decisionflow.fitting.training import REGULARISATION_GRID
    from decisionflow.runtime.heads.fitted import DEFAULT_LAYERS
    from decisionflow.spec import load_rubric

    args.cache.mkdir(parents=True, exist_ok=True)
    folder = ratings_folder(args.source, args.cache)
    rubric_path = args.cache / "rated_sentiment.yaml"
    rubric_path.write_text(RUBRIC, encoding="utf-8")
    rubric = load_rubric(rubric_path)
    labels = rubric.fields["score"].labels
    values = np.asarray([int(label) for label in labels], dtype=float)
    engine = Engine.load(dtype=args.dtype)
    results = []
    print("| set | training rows | zero-shot | multinomial | ordinal | as chosen | McNemar p | Wilcoxon p (errors) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in args.sets.split(","):
        split = split_rows(folder, name)
        train = collect(engine, rubric, split["train"], args.cache / f"{name}-train-{args.dtype}.pt")
        dev_data = collect(engine, rubric, split["dev"], args.cache / f"{name}-dev-{args.dtype}.pt")
        dev = field_data(dev_data, list(range(len(dev_data["gold"]))), len(labels))
        zero_shot = answers_figures(np.asarray(dev.zero_shot_answer), torch.stack(dev.zero_shot).exp().double().numpy(),
                                    dev.gold, values)
        for n in (int(part) for part in args.rows.split(",")):
            fitting = field_data(train, list(range(min(n, len(train["gold"])))), len(labels))
            multinomial, ordinal = heads_alone(fitting, values)
            alone = {"multinomial": score(multinomial, dev, values), "ordinal": score(ordinal, dev, values)}
            info, fitted, _ = fit_field(rubric, "score", fitting, layers=DEFAULT_LAYERS, zero_shot_features=True,
                                      min_rows_per_label=MIN_ROWS_PER_LABEL, regularisation=REGULARISATION_GRID,
                                      folds=5, seed=0)
            head = fitted.hidden
            chosen = score(head, dev, values) if head is not None else zero_shot
            row = {"set": name, "rows": len(fitting.gold), "rows_per_level": info.rows_per_label, "zero_shot": zero_shot,
                   **alone, "as_chosen": {**chosen, "candidate": info.chosen,
                                          "cross_validated": {k: v.model_dump() for k, v in info.candidates.items()}},
                   "paired": paired(alone["multinomial"], alone["ordinal"], dev.gold, values)}
            results.append(row)

            def cell(figures: dict) -> str:
                return f"{figures['accuracy']:.3f} / {figures['mae']:.2f}"

            print(f"| {name} | {row['rows']} | {cell(zero_shot)} | {cell(alone['multinomial'])} | {cell(alone['ordinal'])} | "
                  f"{cell(chosen)} ({info.chosen}) | {row['paired']['mcnemar_p']:.2g} | {row['paired']['wilcoxon_p']:.2g} |",
                  flush=True)
    if args.out:
        for row in results:
            for key in ("zero_shot", "multinomial", "ordinal", "as_chosen"):
                row[key] = {k: v for k, v in row[key].items() if k != "answers"}
        write_results(args.out, {"dtype": args.dtype, "dev_rows": DEV_ROWS, "results": results},
                      conditions={"dtype": dtype_of(engine)})


if __name__ == "__main__":
    main()
