"""CLINC150 as one flat 150-way field vs domain-then-intent, greedy or marginalised, side by side.

    .venv/bin/python -m benchmarks.quality.hierarchy.measure --data ../shared/data --out out/hierarchy.json

Scores intent accuracy on in-scope development rows (a fixed-seed sample) for: the flat rubric
(`workflows/clinc150_intent.yaml`); the hierarchical rubric (`workflows/clinc150_hierarchical.yaml`)
with the intent read under the single best domain (greedy) and marginalised over the top 3 and all
10 domains; each with the raw readout and with content-free debiasing. Reports accuracy, domain
accuracy (hierarchical), mean forward passes and warm milliseconds per request.

`--diagnose` instead asks where the hierarchy loses, under the engine's defaults: how often the domain
field is right, how often the flat field's answer lies in the right domain, and how often the intent
read under the *gold* domain is right (the most any domain-then-intent decision could score if the
domain were always right).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks.common import dtype_of, write_results
from decisionflow.quality.labelled import load_labelled, select_rows
from decisionflow.runtime import executor
from decisionflow.runtime.engine import Engine
from decisionflow.spec.references import shipped_workflow
from decisionflow.spec.rubric import Rubric
from decisionflow.spec.yaml_rubric import load_rubric


def variants() -> dict[str, Rubric]:
    flat = load_rubric(shipped_workflow("clinc150_intent"))
    hierarchical = load_rubric(shipped_workflow("clinc150_hierarchical"))

    def with_k(k: int | None) -> Rubric:
        data = hierarchical.model_dump(mode="json")
        data["fields"]["intent"]["marginalize"] = k
        return Rubric.model_validate({**data, "name": f"clinc150_hierarchical_k{k or 1}"})

    return {"flat": flat, "greedy": with_k(None), "marginalised_3": with_k(3), "marginalised_10": with_k(10)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--out", type=Path, default=None, help="a JSON file; results already in it are kept")
    parser.add_argument("--variants", default="flat,greedy,marginalised_3,marginalised_10")
    parser.add_argument("--debias", default="none,content_free", help="comma-separated readout corrections")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--diagnose", action="store_true", help="where the hierarchy loses (see the module's docstring)")
    args = parser.parse_args()
    chosen = [v.strip() for v in args.variants.split(",") if v.strip()]
    methods = [m.strip() for m in args.debias.split(",") if m.strip()]
    labels = json.loads((args.data / "clinc150" / "labels.json").read_text())
    rows, _ = load_labelled(args.data / "clinc150" / "dev.csv", text_column="text", columns={"intent": "label"})
    rows = select_rows([r for r in rows if r.gold["intent"] != labels["out_of_scope_label"]], limit=args.limit, seed=0)
    texts = [r.text for r in rows]
    engine = Engine.load(threads=args.threads)
    if args.diagnose:
        diagnose(engine, texts, [r.gold["intent"] for r in rows], labels["domain_of_intent"], args.out)
        return
    results = json.loads(args.out.read_text()) if args.out and args.out.is_file() else {}
    results = {key: value for key, value in results.items() if key not in ("conditions", "machine")}
    for name, rubric in variants().items():
        if name not in chosen:
            continue
        for debias in methods:
            engine.decide(rubric, texts[0], debias=debias)  # prepare: head, priors
            began = time.perf_counter()
            decisions = engine.decide_many(rubric, texts, debias=debias)
            seconds = time.perf_counter() - began
            right = sum(d.fields["intent"].value == r.gold["intent"] for d, r in zip(decisions, rows))
            entry = {"n": len(rows), "accuracy": right / len(rows), "seconds": round(seconds, 1),
                     "mean_passes": sum(d.stats.forward_passes for d in decisions) / len(decisions)}
            if "domain" in rubric.fields:
                entry["domain_accuracy"] = sum(
                    d.fields["domain"].value == labels["domain_of_intent"][r.gold["intent"]] for d, r in zip(decisions, rows)
                ) / len(rows)
            single = [engine.decide(rubric, t, debias=debias).stats.timings_ms["total"] for t in texts[:10]]
            entry["ms_per_request_alone"] = sorted(single)[len(single) // 2]
            results[f"{name}/{debias}"] = entry
            print(name, debias, json.dumps(entry), flush=True)
            write_results(args.out, results, conditions={"dtype": dtype_of(engine)})


def diagnose(engine: Engine, texts: list[str], gold: list[str], domain_of: dict[str, str], out: Path | None) -> None:
    """Domain-field accuracy, the flat answer's domain accuracy, and the gold-domain (oracle) bound."""
    # Every (domain, intent) pair of the marginalised result, not only the few shown to users.
    executor.JOINT_ANSWERS_SHOWN = 10_000
    every = variants()
    flat = engine.decide_many(every["flat"], texts)
    hierarchical = engine.decide_many(every["marginalised_10"], texts)
    counts = dict.fromkeys(["flat", "flat_answer_in_gold_domain", "flat_summed_domain", "domain_field",
                            "marginalised_10", "intent_under_gold_domain"], 0)
    for flat_decision, decision, intent in zip(flat, hierarchical, gold):
        domain = domain_of[intent]
        flat_field = flat_decision.fields["intent"]
        counts["flat"] += flat_field.value == intent
        counts["flat_answer_in_gold_domain"] += domain_of[flat_field.value] == domain
        summed: dict[str, float] = {}
        for label, p in flat_field.probabilities.items():
            summed[domain_of[label]] = summed.get(domain_of[label], 0.0) + p
        counts["flat_summed_domain"] += max(summed, key=summed.__getitem__) == domain
        counts["domain_field"] += decision.fields["domain"].value == domain
        counts["marginalised_10"] += decision.fields["intent"].value == intent
        under_gold = {pair["label"]: pair["probability"] for pair in decision.fields["intent"].joint or []
                      if pair["parent"] == domain}
        counts["intent_under_gold_domain"] += bool(under_gold) and max(under_gold, key=under_gold.__getitem__) == intent
    figures = {name: count / len(gold) for name, count in counts.items()}
    figures["domain_accuracy_greedy_needs_to_match_flat"] = figures["flat"] / figures["intent_under_gold_domain"]
    figures["n"] = len(gold)
    print(json.dumps(figures, indent=2), flush=True)
    write_results(out, figures, conditions={"dtype": dtype_of(engine)})


if __name__ == "__main__":
    main()
