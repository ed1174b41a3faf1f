"""A seeded, stratified selection of BANKING77 rows: N rows per intent from train.csv (docs/tuning.md, "BANKING77").

    python -m benchmarks.fitting.tune_banking77.select_rows TRAIN.csv OUT.jsonl --per-intent 10 [--seed 0]

Rows are read as every command reads labelled files (`decisionflow.quality.labelled`), grouped by label in file
order, each group shuffled with one seeded generator (the labels visited in sorted order), and the first N of each
kept; the output is JSONL, one row a line, in train.csv's row order with its columns. The same arguments give the
same file.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import defaultdict
from pathlib import Path

from decisionflow.quality.labelled import load_records


def select(rows: list[dict[str, str]], per_intent: int, seed: int) -> list[dict[str, str]]:
    groups: dict[str, list[int]] = defaultdict(list)
    for index, row in enumerate(rows):
        groups[row["label"]].append(index)
    shuffle = random.Random(seed)
    chosen: list[int] = []
    for label in sorted(groups):
        members = list(groups[label])
        shuffle.shuffle(members)
        chosen += members[:per_intent]
    return [rows[i] for i in sorted(chosen)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("train", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--per-intent", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    columns, rows = load_records(args.train)
    kept = select(rows, args.per_intent, args.seed)
    with args.out.open("w", encoding="utf-8") as handle:
        for row in kept:
            handle.write(json.dumps({column: row[column] for column in columns}, ensure_ascii=False) + "\n")
    labels = {row["label"] for row in kept}
    print(f"{len(kept)} rows, {len(labels)} intents, {args.per_intent} per intent at most (seed {args.seed}) -> {args.out}")


if __name__ == "__main__":
    main()
