"""The 28-field presets as `/v1/decisions` questions: through the `openai` SDK against the engine in process.

    bash benchmarks/serving/decisions_route/run.sh                                  # writes benchmarks/serving/decisions_route/results.json
    .venv/bin/python -m benchmarks.serving.decisions_route.measure --repeats 3 --out x.json

Each preset (`support_triage`, `fintech_fraud`, `code_security`: 28 fields of booleans and 4-5 way choices,
decisionflow/bench/presets.py) becomes 28 questions, one per field in the preset's order: a boolean a
`predicate`, an enum a `choice` over its labels, each named by its key and asked with the preset's description
of it. One server (`create_app`, the default `ServeSettings`, the bundled model in its default number format) is
started in this process on a loopback port, and the same question set is decided two ways, interleaved request
by request so both share the machine's state:

- `sdk`: `openai.OpenAI(base_url=...).decisions.create(...)`, the round trip a client pays (body, parsing,
  the admission path, the micro-batcher, the answer's JSON);
- `in_process`: `engine.decide` on the rubric the route builds (`decisions.build_question_set`), the engine's
  own time.

Reported per preset: the first request of the new set over HTTP (compile, head, content-free prior read in
its own pass), then the median and p90 milliseconds per warm request each way, and the largest difference
between the two ways' probabilities (the same answers: in the default number format a probability may move
with what shares a pass). Beside them, `shared_in_process`: the preset's own rubric read the shared way (one
prompt listing every field, the first pinned; `decisionflow bench`'s `decisionflow` method), decided in
process on the same input, interleaved with the others: what independence costs.

`at_limit`: a new set of short predicates whose rows just fit `--max-question-set-row-tokens` (2,048 by
default), its first request and a warm one over HTTP: the slowest request of a new set the default admits.

Timings need an otherwise idle machine; the load average before and after is written with the results.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

PRESETS = ("support_triage", "fintech_fraud", "code_security")


def preset_questions(preset: Any) -> list[dict[str, Any]]:
    """A preset's fields as Decisions API questions, in the preset's order."""
    questions: list[dict[str, Any]] = []
    for name, spec in preset.rubric.fields.items():
        if spec.kind.value == "boolean":
            questions.append({"type": "predicate", "name": name, "instructions": spec.question})
        else:
            questions.append({"type": "choice", "name": name, "instructions": spec.question,
                              "choices": [{"value": label} for label in spec.options or {}]})
    return questions


def answers_by_sdk(decision: Any) -> dict[str, dict[str, float]]:
    """Every answer as {label: probability} ({"true": p} for a predicate)."""
    found: dict[str, dict[str, float]] = {}
    for answer in decision.answers:
        if answer.type == "predicate":
            found[answer.name] = {"true": answer.probability}
        else:
            found[answer.name] = {str(item.value): item.probability for item in answer.probabilities}
    return found


def answers_in_process(decision: Any, built: Any, questions: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    found: dict[str, dict[str, float]] = {}
    for question, field in zip(questions, built.fields):
        probabilities = decision.fields[field].probabilities
        found[question["name"]] = {"true": probabilities["true"]} if question["type"] == "predicate" else dict(probabilities)
    return found


def largest_gap(first: dict[str, dict[str, float]], second: dict[str, dict[str, float]]) -> float:
    return max(abs(first[name][label] - second[name][label]) for name in first for label in first[name])


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def at_limit(client: Any, engine: Any, model: str, limit: int) -> dict[str, Any]:
    """A new set of short predicates with the most questions whose rows fit `limit`: its first and a warm request."""
    from decisionflow.serve.decisions import build_question_set, parse_decision_request

    def questions(count: int) -> list[dict[str, Any]]:
        return [{"type": "predicate", "name": f"topic_{index}", "instructions": f"Does the message mention topic {index}?"}
                for index in range(count)]

    def rows(count: int) -> int:
        built = build_question_set(parse_decision_request({"model": model, "input": "x", "questions": questions(count)}).questions)
        return sum(field.row_length for field in engine.prepared.compile(built.rubric).fields.values())

    count = 1
    while rows(count + 1) <= limit:
        count += 1
    text = "I was charged twice for my order and nobody answers my emails; refund me today."
    timed = []
    for _ in range(2):
        began = time.perf_counter()
        decision = client.decisions.create(model=model, input=text, questions=questions(count))
        timed.append((time.perf_counter() - began) * 1000)
    found = {"questions": count, "row_tokens": rows(count), "tokens_read": decision.usage.input_tokens,
             "first_request_ms": round(timed[0], 1), "warm_request_ms": round(timed[1], 1)}
    print(f"at the row limit ({limit}): {count} questions, {found['row_tokens']} row tokens; first request "
          f"{timed[0]:.0f} ms, warm {timed[1]:.0f} ms", flush=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=10, help="warm requests each way per preset")
    parser.add_argument("--presets", default=",".join(PRESETS), help="comma-separated preset names")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()

    import openai

    from benchmarks.common import write_results
    from decisionflow.bench.presets import load_preset
    from decisionflow.runtime.engine import Engine
    from decisionflow.serve import Limits, RubricRegistry, ServeSettings, create_app
    from decisionflow.serve.decisions import build_question_set, parse_decision_request
    from decisionflow.serve.server import serving_in_thread

    load_before = os.getloadavg()
    engine = Engine.load(persist_prefixes=False)  # no disk store: a new set's prior is read, not loaded from an earlier run
    # Every preset is a new question set: a budget that lets each through at once.
    app = create_app(engine, RubricRegistry({}), ServeSettings(limits=Limits(new_question_set_burst=len(PRESETS))))
    model = app.state.service.model_name
    results: dict[str, Any] = {"dtype": str(engine.backend.dtype).removeprefix("torch."), "repeats": args.repeats,
                               "load_average_before": list(load_before), "presets": {}}
    with serving_in_thread(app) as port:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="bench", max_retries=0, timeout=600)
        for name in args.presets.split(","):
            preset = load_preset(name)
            questions = preset_questions(preset)
            parsed = parse_decision_request({"model": model, "input": preset.context, "questions": questions})
            built = build_question_set(parsed.questions)
            began = time.perf_counter()
            first = client.decisions.create(model=model, input=preset.context, questions=questions)
            first_ms = (time.perf_counter() - began) * 1000
            sdk_ms: list[float] = []
            engine_ms: list[float] = []
            shared_ms: list[float] = []
            engine.decide(preset.rubric, preset.context)  # prepared before it is timed, as the route's set is
            gap = 0.0
            for _ in range(args.repeats):
                began = time.perf_counter()
                engine.decide(preset.rubric, preset.context)
                shared_ms.append((time.perf_counter() - began) * 1000)
                began = time.perf_counter()
                over_http = client.decisions.create(model=model, input=preset.context, questions=questions)
                sdk_ms.append((time.perf_counter() - began) * 1000)
                began = time.perf_counter()
                decided = engine.decide(built.rubric, parsed.input)  # the server is idle: one caller at a time
                engine_ms.append((time.perf_counter() - began) * 1000)
                gap = max(gap, largest_gap(answers_by_sdk(over_http), answers_in_process(decided, built, questions)))
            compiled, _ = engine.compile(built.rubric)
            results["presets"][name] = {
                "questions": len(questions),
                "row_tokens": sum(field.row_length for field in compiled.fields.values()),
                "input_tokens": decided.stats.input_tokens,
                "tokens_read": over_http.usage.input_tokens,
                "forward_passes": decided.stats.forward_passes,
                "first_request_ms": round(first_ms, 1),
                "first_request_tokens_read": first.usage.input_tokens,
                "sdk_ms": {"p50": round(statistics.median(sdk_ms), 1), "p90": round(percentile(sdk_ms, 0.9), 1)},
                "in_process_ms": {"p50": round(statistics.median(engine_ms), 1), "p90": round(percentile(engine_ms, 0.9), 1)},
                "shared_in_process_ms": {"p50": round(statistics.median(shared_ms), 1),
                                         "p90": round(percentile(shared_ms, 0.9), 1)},
                "largest_probability_gap": gap,
                "same_answers": all(
                    (a.choice if a.type == "choice" else a.probability > 0.5) == (
                        decided.fields[field].value if a.type == "choice" else decided.fields[field].probabilities["true"] > 0.5)
                    for a, field in zip(over_http.answers, built.fields)),
            }
            row = results["presets"][name]
            print(f"{name}: {row['questions']} questions, {row['row_tokens']} row tokens; first request {row['first_request_ms']:.0f} ms; "
                  f"warm sdk p50 {row['sdk_ms']['p50']:.0f} ms, in process p50 {row['in_process_ms']['p50']:.0f} ms "
                  f"(shared reading {row['shared_in_process_ms']['p50']:.0f} ms); "
                  f"largest gap {row['largest_probability_gap']:.1e}, same answers {row['same_answers']}", flush=True)
        results["at_limit"] = at_limit(client, engine, model, Limits().max_question_set_row_tokens)
    results["load_average_after"] = list(os.getloadavg())
    write_results(args.out, results, conditions={"dtype": results["dtype"]})


if __name__ == "__main__":
    main()
