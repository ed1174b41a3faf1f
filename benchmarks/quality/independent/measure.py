"""Independent questions against the shared reading: accuracy on the development sets, paired, and cost.

    .venv/bin/python -m benchmarks.quality.independent.measure --part accuracy --out benchmarks/quality/independent/accuracy.json
    .venv/bin/python -m benchmarks.quality.independent.measure --part speed --out benchmarks/quality/independent/speed.json
    .venv/bin/python -m benchmarks.quality.independent.measure --part independence --dtype bfloat16 --out benchmarks/quality/independent/independence-bfloat16.json

Accuracy: every shipped workflow of a development set is read twice on the same rows: as shipped (the
shared reading, the engine's default correction) and with `reading: independent` (each field a question of
its own after the input). The independent reading is read raw once; its corrections are computed from that
reading and the content-free inputs' reading, exactly as the engine divides (`fitting.corrections`). Every
independent variant is paired with the shared one row by row (McNemar's exact test).

Speed (an otherwise idle machine): the median warm request of a 28-question preset read both ways, and a
request bringing 6 new yes/no questions about a 100-token input against the same request repeated.

Independence: every question of the 28-question presets asked alone and among the others (read independently),
the largest gap between the two distributions and how many answers differ, in the engine's number format.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.common import DATA, dtype_of, write_results
from benchmarks.quality.independent.against_filed import PRESETS
from decisionflow.bench.presets import load_preset
from decisionflow.compiler import independent as independent_layout
from decisionflow.fitting import corrections
from decisionflow.fitting.readings import read_all_fields
from decisionflow.quality.labelled import load_labelled, select_rows
from decisionflow.runtime.engine import Engine
from decisionflow.runtime.readout.debias import CONTENT_FREE_BY_READING, CONTENT_FREE_INPUTS
from decisionflow.spec.references import shipped_workflow
from decisionflow.spec.rubric import Debias, FieldKind, Reading, Rubric
from decisionflow.spec.yaml_rubric import load_rubric
from decisionflow.stats import mcnemar, metrics

SETS = {
    "banking77": ("banking77_intent", {"intent": "label"}, 300),
    "clinc150": ("clinc150_intent", {"intent": "label"}, 300),
    "sst2": ("sentiment", {"sentiment": "label"}, 200),
    "nlbse24_issues": ("issue_triage", {"label": "label", "repo": "repo"}, 150),
}
BOOLEAN_SETS = {
    # Yes/no readings of two development sets (no shipped workflow asks a yes/no question of them): where a row
    # layout writes yes/no questions another way, this is where it shows (accuracy-compact-yes-no.json). Run them
    # with --sets sst2_positive,nlbse24_bug.
    "sst2_positive": ("sst2", "sentiment", "Whether the sentence expresses a positive opinion of the film", "positive", 200),
    "nlbse24_bug": ("nlbse24_issues", "issue_triage", "Whether the issue reports a bug", "bug", 150),
}
CORRECTIONS = (Debias.NONE, Debias.CONTENT_FREE_HALF, Debias.CONTENT_FREE)
DEFAULT_PRIOR_INPUT = CONTENT_FREE_BY_READING[Reading.INDEPENDENT][0]
LAYOUTS = {"": independent_layout.INLINE, "_bare": independent_layout.INLINE_BARE}
"""The row layouts read: the default (options quoted as their JSON literals) and string options bare, keyed by
the suffix of their result names. (accuracy-bare-options.json and accuracy-compact-yes-no.json were written when
the variant was keyed "" and the quoted row "_listed".)"""


def independent(rubric: Rubric, suffix: str = "") -> Rubric:
    return Rubric.model_validate({**rubric.model_dump(), "name": rubric.name + suffix, "reading": "independent"})


def _set(data: Path, name: str, limit: int | None) -> tuple[Rubric, list[Any], dict[str, str]]:
    """The set's shared rubric, its rows (gold per field) and the field -> column mapping."""
    if name in BOOLEAN_SETS:
        folder, workflow, question, positive, default_limit = BOOLEAN_SETS[name]
        shipped = load_rubric(shipped_workflow(workflow))
        shared = Rubric(name=name, instructions=shipped.instructions,
                        fields={"answer": {"kind": "boolean", "question": question}})
        rows, _ = load_labelled(data / folder / "dev.csv", text_column="text", columns={"answer": "label"})
        rows = [replace(row, gold={"answer": "true" if row.gold["answer"] == positive else "false"}) for row in rows]
        return shared, select_rows(rows, limit=limit or default_limit, seed=0), {"answer": "label"}
    workflow, columns, default_limit = SETS[name]
    rows, _ = load_labelled(data / name / "dev.csv", text_column="text", columns=columns)
    return load_rubric(shipped_workflow(workflow)), select_rows(rows, limit=limit or default_limit, seed=0), columns


def _paired(gold: list[Any], reference: list[Any], predicted: list[Any],
            names: tuple[str, str] = ("shared", "independent")) -> dict[str, Any]:
    """`predicted`'s scores, and McNemar's exact test against `reference` on the same rows."""
    test = mcnemar([r == g for r, g in zip(reference, gold)], [p == g for p, g in zip(predicted, gold)])
    return {"accuracy": metrics.accuracy(gold, predicted), "macro_f1": metrics.macro_f1(gold, predicted),
            f"only_{names[0]}_right": test.only_first, f"only_{names[1]}_right": test.only_second,
            "mcnemar_p": test.p}


def accuracy(engine: Engine, data: Path, name: str, limit: int | None) -> dict[str, Any]:
    shared, rows, columns = _set(data, name, limit)
    texts = [row.text for row in rows]
    began = time.perf_counter()
    shared_read = read_all_fields(engine, shared, texts)
    out: dict[str, Any] = {"rows": len(rows), "seconds": {"shared": round(time.perf_counter() - began, 1)},
                           "fields": {}}
    kept: dict[str, list[int]] = {}
    for field in columns:
        spec = shared.fields[field]
        offered = set(spec.labels) if spec.kind is FieldKind.CHOICE else None
        kept[field] = [i for i, row in enumerate(rows) if offered is None or row.gold[field] in offered]
        gold = [rows[i].gold[field] for i in kept[field]]
        reference = [shared_read[i][field].predicted for i in kept[field]]
        out["fields"][field] = {"rows": len(gold), "shared": metrics.accuracy(gold, reference),
                                "shared_macro_f1": metrics.macro_f1(gold, reference)}
    by_default: dict[str, dict[str, list[Any]]] = {field: {} for field in columns}
    for suffix, layout in LAYOUTS.items():
        alone = independent(shared, suffix)
        independent_layout.DEFAULT_INLINE = layout
        try:
            began = time.perf_counter()
            raw = read_all_fields(engine, alone, texts, debias="none")
            out["seconds"][f"independent{suffix}"] = round(time.perf_counter() - began, 1)
            free = read_all_fields(engine, alone, list(CONTENT_FREE_INPUTS), debias="none")
        finally:
            independent_layout.DEFAULT_INLINE = independent_layout.INLINE
        for field in columns:
            gold = [rows[i].gold[field] for i in kept[field]]
            reference = [shared_read[i][field].predicted for i in kept[field]]
            # The prior from every content-free input, and from each one alone (cheaper to read).
            sources = {"": list(range(len(CONTENT_FREE_INPUTS))),
                       **{f"_from_{text}": [index] for index, text in enumerate(CONTENT_FREE_INPUTS)}}
            for source, inputs in sources.items():
                prior = corrections.mean_prior([free[i][field].probabilities for i in inputs])
                for method in CORRECTIONS if not source else CORRECTIONS[1:]:
                    predicted = [metrics.top_label(corrections.divide(raw[i][field].probabilities, prior,
                                                                      method.strength)) for i in kept[field]]
                    out["fields"][field][f"independent{suffix}_{method.value}{source}"] = _paired(gold, reference, predicted)
                    if method is Debias.CONTENT_FREE and source == f"_from_{DEFAULT_PRIOR_INPUT}":
                        by_default[field][suffix] = predicted
    for field, figures in out["fields"].items():
        # The bare row against the default one, both with the default correction.
        gold = [rows[i].gold[field] for i in kept[field]]
        figures["bare_against_quoted"] = _paired(gold, by_default[field][""], by_default[field]["_bare"],
                                                 names=("quoted", "bare"))
    return out


def _median_ms(engine: Engine, rubrics: Any, text: str, repeats: int, **options: Any) -> float:
    """Median milliseconds of `engine.decide` over `repeats` calls, the i-th deciding `rubrics(i)`."""
    timings = []
    for index in range(repeats):
        rubric = rubrics(index)
        began = time.perf_counter()
        engine.decide(rubric, text, **options)
        timings.append((time.perf_counter() - began) * 1000)
    return statistics.median(timings)


TICKET = (
    "Subject: charged twice for my March invoice. Hello, I was billed twice this month ($49 each) for the same "
    "subscription, and my bank shows both charges as settled. I already wrote to you last week and nobody "
    "answered. Please refund the duplicate charge within 12 hours or I will cancel my account and dispute the "
    "payment with my bank. I have attached both receipts and the bank statement. Thanks, Dana (customer since 2019, "
    "team plan, account 4471)."
)
QUESTIONS = (
    "Whether the customer asks for money back", "Whether the customer threatens to cancel",
    "Whether the message mentions a bank", "Whether the customer is angry",
    "Whether receipts are attached", "Whether a human must review it",
)


def six_questions(nonce: str) -> Rubric:
    return Rubric(name="six", reading="independent", fields={
        f"q{i}": {"kind": "boolean", "question": f"{question}{nonce}"} for i, question in enumerate(QUESTIONS)})


def speed(engine: Engine, repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {"presets": {}, "new_question_sets": {}}
    for name in PRESETS:
        preset = load_preset(name)
        shared, alone = preset.rubric, independent(preset.rubric)
        engine.decide(shared, preset.context)
        engine.decide(alone, preset.context)
        shared_ms = _median_ms(engine, lambda _, rubric=shared: rubric, preset.context, repeats)
        alone_ms = _median_ms(engine, lambda _, rubric=alone: rubric, preset.context, repeats)
        decision = engine.decide(alone, preset.context)
        out["presets"][name] = {"fields": len(shared.fields), "shared_ms": round(shared_ms, 1),
                                "independent_ms": round(alone_ms, 1), "ratio": round(alone_ms / shared_ms, 2),
                                "independent_passes": decision.stats.forward_passes,
                                "independent_tokens": decision.stats.tokens_prefilled}
    tokens = len(engine.view.encode(TICKET))
    for debias in (None, "none"):  # the reading's default correction (its prior read in the pass), and none
        repeated = six_questions("")
        engine.decide(repeated, TICKET, debias=debias)
        repeated_ms = _median_ms(engine, lambda _, rubric=repeated: rubric, TICKET, repeats, debias=debias)
        # A new set each time: the questions' text changes, so nothing of it is prepared.
        new_ms = _median_ms(engine, lambda index, debias=debias: six_questions(f" (set {index} {debias})"), TICKET,
                            repeats, debias=debias)
        out["new_question_sets"][debias or "default"] = {"input_tokens": tokens, "repeated_ms": round(repeated_ms, 1),
                                            "new_ms": round(new_ms, 1), "ratio": round(new_ms / repeated_ms, 2)}
    return out


def independence(engine: Engine) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in PRESETS:
        preset = load_preset(name)
        every = independent(preset.rubric)
        together = engine.decide(every, preset.context)
        declared = every.model_dump()
        gaps, changed = [], []
        for field in preset.rubric.fields:
            alone_rubric = Rubric.model_validate({**declared, "fields": {field: declared["fields"][field]}})
            alone, among = engine.decide(alone_rubric, preset.context).fields[field], together.fields[field]
            gaps.append(max(abs(alone.probabilities[k] - among.probabilities[k]) for k in among.probabilities))
            if alone.value != among.value:
                changed.append(field)
        out[name] = {"questions": len(gaps), "largest_gap": max(gaps), "answers_changed": changed}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("accuracy", "speed", "independence"), required=True)
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--limit", type=int, default=None, help="rows per set (default: each set's own)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    engine = Engine.load(dtype=args.dtype, persist_prefixes=False)
    result: dict[str, Any] = {"dtype": dtype_of(engine)}
    if args.part == "accuracy":
        result["sets"] = {name: accuracy(engine, args.data, name, args.limit) for name in args.sets.split(",")}
    elif args.part == "speed":
        result["speed"] = speed(engine, args.repeats)
    else:
        result["independence"] = independence(engine)
    print(json.dumps(result, indent=2))
    write_results(args.out, result, conditions={"dtype": result["dtype"]})


if __name__ == "__main__":
    main()
