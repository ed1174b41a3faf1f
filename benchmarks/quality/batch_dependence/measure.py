"""Does a request's answer depend on what shares its pass? Float32 against bfloat16 on BANKING77 dev rows.

Decides the first 40 dev rows in one batch, the same batch in reverse order, and the first 10 one at a
time, in each number format, and prints the largest probability difference and the answers that changed:

    .venv/bin/python -m benchmarks.quality.batch_dependence.measure --out FILE
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.common import ROOT, labelled, write_results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="write the table as JSON here")
    args = parser.parse_args()
    from decisionflow import Engine
    from decisionflow.spec import load_rubric

    texts = [row.text for row in labelled("banking77", "dev")][:40]
    rubric = load_rubric(ROOT / "workflows" / "banking77_intent.yaml")
    print("| dtype | largest |Δp| batch vs reversed | changed | largest |Δp| batch vs alone (10) | changed |")
    print("| --- | ---: | ---: | ---: | ---: |")
    table = {}
    for dtype in ("float32", "bfloat16"):
        engine = Engine.load(dtype=dtype)
        together = engine.decide_many(rubric, texts)
        reversed_ = engine.decide_many(rubric, texts[::-1])[::-1]
        alone = [engine.decide(rubric, text) for text in texts[:10]]

        def compare(first, second) -> tuple[float, int]:
            gap = max(abs(a.fields["intent"].probabilities[k] - b.fields["intent"].probabilities[k])
                      for a, b in zip(first, second) for k in a.fields["intent"].probabilities)
            return gap, sum(a.fields["intent"].value != b.fields["intent"].value for a, b in zip(first, second))

        (order_gap, order_changed), (alone_gap, alone_changed) = compare(together, reversed_), compare(together[:10], alone)
        print(f"| {dtype} | {order_gap:.4f} | {order_changed} | {alone_gap:.4f} | {alone_changed} |", flush=True)
        table[dtype] = {"largest_gap_batch_vs_reversed": order_gap, "changed_batch_vs_reversed": order_changed,
                        "largest_gap_batch_vs_alone": alone_gap, "changed_batch_vs_alone": alone_changed}
    write_results(args.out, {"rows": len(texts), "alone_rows": 10, "field": "intent", "by_dtype": table},
                  conditions={"dtype": "float32 and bfloat16"})


if __name__ == "__main__":
    sys.exit(main())
