"""In-context examples on the development sets: k labelled training rows per label written into the
prompt's head as earlier (user, assistant) turns, against the zero-shot prompt on the same dev rows.

    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.fitting.in_context.measure --sets banking77,clinc150,sst2,nlbse24_issues

The examples for k are the training rows `benchmarks/fitting/heads/measure.py --study curve` fits its heads on at
the same k (its `subsample`, seed 0, over the training rows with a label the rubric offers), shown in a
shuffled order (seed 0), each as `Input:` + its text and the JSON answer line(s) in the engine's own
layout (`compiler.example_answer`; issue_triage's examples answer both `label` and `repo`). A setting
runs only when its head, the answers and the longest scored dev row fit the model's context; otherwise
it is skipped with the token counts. The readout is the engine's own (`Engine.decide_each` with the
default debias: the content-free prior is read once per prompt, with the examples in its head).

The examples are the rubric's own (`examples:`, as a user declares them), so every prompt gets its own
head cache and its own content-free prior. McNemar's exact p compares in-context with zero-shot on
the same dev rows. Results go to stdout as Markdown and to --out as JSON.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from pathlib import Path

import torch

# The same sets, reader and row sampler as the fitted heads' measurement, so both use the same rows.
from benchmarks.common import ROOT, SETS, dtype_of, labelled, subsample, write_results
from decisionflow.quality.labelled import LabelledRow
from decisionflow.stats import mcnemar

DEV_SUBSET = {"banking77": 300, "clinc150": 300}
"""Dev rows scored per set (a fixed random subset, seed 0); sets not listed score every dev row."""


def examples_for(
    rubric, field: str, train: list[LabelledRow], k: int, order_seed: int = 0
) -> list[tuple[str, dict]]:
    labels = rubric.fields[field].labels
    gold = [labels.index(r.gold[field]) for r in train]
    chosen = subsample(torch.tensor(gold), k)
    random.Random(order_seed).shuffle(chosen)
    examples = []
    for i in chosen:
        row = train[i]
        # Every field of the rubric the training row labels (issue_triage: `label` and `repo`).
        answers = {name: row.gold[name] for name in rubric.fields
                   if name in row.gold and row.gold[name] in rubric.fields[name].labels}
        answers[field] = row.gold[field]
        examples.append((row.text, answers))
    return examples


def with_examples(rubric, examples):
    """The rubric with `examples` (input text, {field: label}) as its in-context examples."""
    from decisionflow.spec.rubric import Rubric

    shown = [{"text": text, "answers": answers} for text, answers in examples]
    return Rubric.model_validate({**rubric.model_dump(), "examples": shown})


def score(engine, rubric, field: str, texts: list[str], gold: list[str]) -> dict:
    from decisionflow.spec.rubric import label_of

    began = time.perf_counter()
    outcomes = engine.decide_each(rubric, texts)
    seconds = time.perf_counter() - began
    decided = [o for o in outcomes if hasattr(o, "fields")]
    first = decided[0].stats.timings_ms if decided else {}
    answered = [(o.fields[field], g) for o, g in zip(outcomes, gold) if hasattr(o, "fields")]
    right = [hasattr(o, "fields") and o.fields[field].value is not None and label_of(o.fields[field].value) == g
             for o, g in zip(outcomes, gold)]
    correct = sum(right)
    # The model's own distribution, before the debias (what `debias: none` would answer for this field).
    raw = [max(f.raw_probabilities, key=f.raw_probabilities.get) if f.raw_probabilities else None for f, _ in answered]
    predicted = Counter(label_of(f.value) for f, _ in answered if f.value is not None)
    return {
        "accuracy": correct / len(texts),
        "raw_accuracy": sum(1 for r, (_, g) in zip(raw, answered) if r == g) / len(texts),
        "top_share": predicted.most_common(1)[0][1] / len(texts) if predicted else 0.0,
        "top_label": predicted.most_common(1)[0][0] if predicted else None,
        "errors": len(outcomes) - len(decided),
        "seconds": seconds,
        "prepare_s": sum(v for key, v in first.items() if key.startswith(("compile", "head_", "prior_"))) / 1000,
        "right": right,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default="banking77,clinc150,sst2,nlbse24_issues")
    parser.add_argument("--ks", default="1,2,5")
    parser.add_argument("--order-seeds", default="0",
                        help="shuffle seeds of the examples' order (the same rows): one run per seed, to see the spread")
    parser.add_argument("--debias", help="override the engine's default readout correction (default: the engine's)")
    parser.add_argument("--dry-run", action="store_true", help="only count tokens and say what fits")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from decisionflow.compiler import compile_rubric
    from decisionflow.runtime.engine import Engine
    from decisionflow.spec import load_rubric

    engine = Engine.load(threads=1, persist_prefixes=False, debias=args.debias)
    context = engine.backend.max_positions
    print(f"model context {context} positions; debias {engine.options.debias.value if engine.options.debias else 'per reading'}; catalog {engine.options.catalog.value}",
          flush=True)
    results, skipped, table = [], [], []
    for name in args.sets.split(","):
        rubric_path, field, _ = SETS[name]
        rubric = load_rubric(ROOT / rubric_path)
        labels = rubric.fields[field].labels
        train = [r for r in labelled(name, "train") if r.gold[field] in labels]
        every_dev = labelled(name, "dev")
        dev = [r for r in every_dev if r.gold[field] in labels]
        if name in DEV_SUBSET:
            dev = random.Random(0).sample(dev, DEV_SUBSET[name])
        texts, gold = [r.text for r in dev], [r.gold[field] for r in dev]

        def compiled_with(examples, rubric=rubric):
            return compile_rubric(engine.tokenizer, with_examples(rubric, examples), mode=engine.options.mode,
                                  view=engine.view, catalog=engine.options.catalog)

        plain = compiled_with(())
        longest = max(len(plain.request_tokens(t)) for t in texts)
        fixed0 = plain.positions_before_input
        print(f"\n{name}: {len(dev)} dev rows (of {len(every_dev)}), zero-shot head "
              f"{len(plain.prefix_tokens)} tokens, longest dev request {longest} tokens", flush=True)
        fitting = [t for t in texts if fixed0 + len(plain.request_tokens(t)) <= context]
        if len(fitting) < len(texts):
            print(f"  {len(texts) - len(fitting)} dev rows do not fit even the zero-shot prompt (counted wrong)")
        if args.dry_run:
            zero = {"accuracy": float("nan"), "raw_accuracy": float("nan"), "top_share": 0.0, "top_label": None,
                    "errors": 0, "seconds": 0.0, "prepare_s": 0.0}
        else:
            zero = score(engine, rubric, field, texts, gold)
        if not args.dry_run:
            print(f"  k=0: accuracy {zero['accuracy']:.3f} (raw {zero['raw_accuracy']:.3f}; most answered {zero['top_label']} "
                  f"{zero['top_share']:.0%}; {zero['errors']} errors) in {zero['seconds']:.0f} s", flush=True)
        results.append({"set": name, "k": 0, "head_tokens": len(plain.prefix_tokens), "example_tokens": 0,
                        "dev_rows": len(texts), **zero})
        engine.prepared.clear()
        for k in (int(x) for x in args.ks.split(",")):
            for order_seed in (int(x) for x in args.order_seeds.split(",")):
                examples = examples_for(rubric, field, train, k, order_seed)
                compiled = compiled_with(examples)
                extra = len(compiled.prefix_tokens) - len(plain.prefix_tokens)
                need = compiled.positions_before_input + longest
                if need > context:
                    reason = (f"head {len(compiled.prefix_tokens)} tokens ({extra} of {len(examples)} examples) + answers "
                              f"+ longest dev request {longest} = {need} positions > {context}")
                    print(f"  k={k}: skipped: {reason}", flush=True)
                    skipped.append({"set": name, "k": k, "reason": reason})
                    break
                if args.dry_run:
                    print(f"  k={k}: fits: head {len(compiled.prefix_tokens)} tokens ({extra} of examples), needs {need}")
                    break
                got = score(engine, with_examples(rubric, examples), field, texts, gold)
                got["p_vs_zero_shot"] = mcnemar(got["right"], zero["right"]).p
                engine.prepared.clear()
                print(f"  k={k} order {order_seed}: {len(examples)} examples, {extra} tokens: accuracy {got['accuracy']:.3f}"
                      f" (raw {got['raw_accuracy']:.3f}; most answered {got['top_label']} {got['top_share']:.0%}; "
                      f"{got['errors']} errors; McNemar p vs zero-shot {got['p_vs_zero_shot']:.2g}) in {got['seconds']:.0f} s "
                      f"(prepare {got['prepare_s']:.0f} s)", flush=True)
                row = {"set": name, "k": k, "order_seed": order_seed, "head_tokens": len(compiled.prefix_tokens),
                       "example_tokens": extra, "dev_rows": len(texts), "zero_shot": zero["accuracy"],
                       "zero_shot_raw": zero["raw_accuracy"], "zero_shot_top_share": zero["top_share"], **got}
                results.append(row)
                table.append(row)
    print("\n| set | k per label | order seed | examples' tokens in head | head tokens | dev rows | zero-shot acc "
          "| in-context acc | Δ | raw acc zero-shot / in-context | most frequent answer's share zero-shot / in-context "
          "| seconds (of which head+prior) |\n" + "| --- " * 12 + "|")
    for row in table:
        print(f"| {row['set']} | {row['k']} | {row['order_seed']} | {row['example_tokens']} | {row['head_tokens']} | "
              f"{row['dev_rows']} | {row['zero_shot']:.3f} | {row['accuracy']:.3f} | {row['accuracy'] - row['zero_shot']:+.3f} | "
              f"{row['zero_shot_raw']:.3f} / {row['raw_accuracy']:.3f} | {row['zero_shot_top_share']:.0%} / {row['top_share']:.0%} | "
              f"{row['seconds']:.0f} ({row['prepare_s']:.0f}) |")
    for row in skipped:
        print(f"| {row['set']} | {row['k']} | skipped: {row['reason']} |")
    if args.out:
        for row in results:
            row.pop("right", None)
        write_results(args.out, {"results": results, "skipped": skipped}, conditions={"dtype": dtype_of(engine)})


if __name__ == "__main__":
    sys.exit(main())
