"""Pair two `decisionflow eval --out` runs of the same rows: accuracy of each, rows only one got right,
McNemar's exact p, and how often the two answered alike. Rows whose gold label is not an answer of the
field (CLINC150's `oos`) are left out, as eval's own accuracy leaves them.

usage: python -m benchmarks.paired_rows FIRST/rows.jsonl SECOND/rows.jsonl [--skip-gold oos]
"""

import argparse
import json
from pathlib import Path

from decisionflow.stats import mcnemar_exact


def read_rows(path: Path) -> dict[int, dict]:
    return {row["row"]: row for row in map(json.loads, path.read_text(encoding="utf-8").splitlines())}


def paired(first: dict[int, dict], second: dict[int, dict], skip_gold: set[str]) -> dict:
    if first.keys() != second.keys():
        raise SystemExit("the two runs scored different rows")
    kept = [index for index in first if str(first[index]["gold"]) not in skip_gold]
    right_first = {index for index in kept if first[index]["predicted"] == first[index]["gold"]}
    right_second = {index for index in kept if second[index]["predicted"] == second[index]["gold"]}
    only_first, only_second = len(right_first - right_second), len(right_second - right_first)
    return {
        "rows": len(kept),
        "accuracy_first": len(right_first) / len(kept), "accuracy_second": len(right_second) / len(kept),
        "only_first_right": only_first, "only_second_right": only_second,
        "mcnemar_p": mcnemar_exact(only_first, only_second),
        "same_answer": sum(first[i]["predicted"] == second[i]["predicted"] for i in kept) / len(kept),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument("--skip-gold", action="append", default=[])
    args = parser.parse_args()
    result = {"first": str(args.first), "second": str(args.second),
              **paired(read_rows(args.first), read_rows(args.second), set(args.skip_gold))}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
