"""Scoring a rubric against labelled data: accuracy, macro-F1, calibration, abstention, order effects.

The engine's readings are collected once per row (top label, its distribution, candidate mass and
whether the field abstained), then scored by `metrics`. The main figures are the readout `decisionflow
run` gives (its readout correction, then the calibration file); when that readout corrects the
model's distributions, the raw readout (no correction, no calibration) is scored beside it — taken
from the same passes when the field is decided before any answer is written into the prompt, read
again otherwise — and `comparisons` adds option-order flips for both and the wording ablation.
Conventions:

- `accuracy`, `macro_f1` and `ece` use the rows whose gold label is one of the field's options
  ("in scope") and the field's top label, whether or not it abstained; abstention is scored apart.
- A row whose gold label is not offered (CLINC150's `oos`) counts only for abstention: it is right
  when the field abstains (`oos_recall`).
- `valid_rate` is the fraction of rows that produced a decision at all. An abstained field is not
  invalid: it is "not covered" (`coverage`).
- The JSON-generation baseline gives no probabilities, so its `ece` and `mean_candidate_mass` are None.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Sequence

from ..errors import DataError, DecisionflowError
from ..fitting.readings import (
    CHUNK_ROWS,
    Progress,
    Reading,
    applied_correction,
    read_all_fields,
    read_rows,
    read_rows_raw_and_zero_shot,
)
from ..runtime.readout.calibration import Calibration, FieldCalibration
from ..spec.rubric import Debias, FieldKind, Rubric
from ..stats import expected_calibration_error, mcnemar_exact, metrics, reliability_bins
from .comparisons import (
    ReadSetting,
    ablation_correction,
    compare_orders,
    compare_wordings,
)
from .labelled import LabelledRow, label_of, offered_labels

__all__ = [
    "CHUNK_ROWS", "EvalRun", "Progress", "Reading", "evaluate", "read_all_fields", "read_rows", "score_abstention",
    "score_baseline", "score_readings", "with_thresholds", "write_outputs",
]

def score_readings(gold: Sequence[str], readings: Sequence[Reading], options: Sequence[str], *,
                   score: bool = False) -> dict[str, Any]:
    """The eval.json figures for the engine on these rows. `score`: the field is a score, whose
    labels are integers; its mean absolute error (in levels, over the in-scope rows it answered) is added."""
    offered = set(options)
    in_scope = [i for i, g in enumerate(gold) if g in offered]
    out_of_scope = [i for i, g in enumerate(gold) if g not in offered]
    gold_in = [gold[i] for i in in_scope]
    predicted_in = [readings[i].predicted for i in in_scope]
    answered_in = [i for i in in_scope if readings[i].confidence is not None]
    confidences = [readings[i].confidence for i in answered_in]
    correct = [readings[i].predicted == gold[i] for i in answered_in]
    masses = [r.candidate_mass for r in readings if r.candidate_mass is not None]
    summary: dict[str, Any] = {
        "n": len(gold),
        "n_in_scope": len(in_scope),
        "accuracy": _number(metrics.accuracy(gold_in, predicted_in)),
        "macro_f1": _number(metrics.macro_f1(gold_in, predicted_in)),
        "valid_rate": sum(not r.error for r in readings) / len(readings) if readings else None,
        "ece": _number(expected_calibration_error(confidences, correct)),  # type: ignore[arg-type]
        "mean_candidate_mass": sum(masses) / len(masses) if masses else None,
        "errors": sum(bool(r.error) for r in readings),
        "reliability": [vars(b) for b in reliability_bins(confidences, correct)],  # type: ignore[arg-type]
    }
    if score:
        distances = [abs(int(readings[i].predicted) - int(gold[i])) for i in in_scope if readings[i].predicted is not None]
        summary["mean_absolute_error"] = sum(distances) / len(distances) if distances else None
    if out_of_scope:
        summary["n_out_of_scope"] = len(out_of_scope)
    return summary


def paired_difference(gold: Sequence[str], readings: Sequence[Reading], reference: Sequence[Reading],
                      options: Sequence[str]) -> dict[str, Any]:
    """How `readings` and `reference` differ on the same in-scope rows: rows only one got right, and
    McNemar's exact p (two-sided) for the paired difference."""
    offered = set(options)
    rows = [i for i, g in enumerate(gold) if g in offered]
    wins = sum(readings[i].predicted == gold[i] != reference[i].predicted for i in rows)
    losses = sum(reference[i].predicted == gold[i] != readings[i].predicted for i in rows)
    return {"rows": len(rows), "only_fitted_right": wins, "only_zero_shot_right": losses,
            "mcnemar_p": mcnemar_exact(wins, losses)}


def score_abstention(gold: Sequence[str], readings: Sequence[Reading], options: Sequence[str]) -> dict[str, Any]:
    """Coverage and accuracy on covered in-scope rows, and how many out-of-scope rows abstained."""
    offered = set(options)
    in_scope = [i for i, g in enumerate(gold) if g in offered]
    out_of_scope = [i for i, g in enumerate(gold) if g not in offered]
    covered = [i for i in in_scope if not readings[i].abstained and readings[i].predicted is not None]
    right_in = sum(readings[i].predicted == gold[i] for i in covered)
    abstained_out = sum(readings[i].abstained for i in out_of_scope)
    return {
        "abstained_rows": sum(r.abstained for r in readings),
        "coverage": len(covered) / len(in_scope) if in_scope else None,
        "covered_accuracy": right_in / len(covered) if covered else None,
        "oos_recall": abstained_out / len(out_of_scope) if out_of_scope else None,
        # As in Larson et al. (2019): an in-scope row is right when answered correctly, an
        # out-of-scope row when the field abstains.
        "overall_accuracy": (right_in + abstained_out) / len(gold) if gold else None,
        "overall_accuracy_without_abstention": (
            sum(readings[i].predicted == gold[i] for i in in_scope) / len(gold) if gold else None
        ),
    }


def score_baseline(gold: Sequence[str], records: Sequence[Any], field_name: str, options: Sequence[str],
                   readings: Sequence[Reading]) -> dict[str, Any]:
    """The same figures for unconstrained JSON generation, plus agreement with the engine's answers."""
    offered = set(options)
    in_scope = [i for i, g in enumerate(gold) if g in offered]
    predicted = [label_of(r.values.get(field_name)) if r.valid and r.values else None for r in records]
    agreements = []
    for record, reading in zip(records, readings):
        if record.valid and record.values and reading.answers:
            shared = metrics.agreement(reading.answers, {k: label_of(v) for k, v in record.values.items()})
            if shared is not None:
                agreements.append(shared)
    latencies = [r.latency_ms for r in records]
    # Why answers were invalid (e.g. a repeated key, an unknown label): the commonest few reasons.
    reasons = Counter(str(getattr(r, "reason", "") or "unknown")[:80] for r in records if not r.valid)
    return {
        "n": len(gold),
        "n_in_scope": len(in_scope),
        "accuracy": _number(metrics.accuracy([gold[i] for i in in_scope], [predicted[i] for i in in_scope])),
        "macro_f1": _number(metrics.macro_f1([gold[i] for i in in_scope], [predicted[i] for i in in_scope])),
        "valid_rate": sum(bool(r.valid) for r in records) / len(records) if records else None,
        "ece": None,
        "mean_candidate_mass": None,
        "agreement_with_decisionflow": sum(agreements) / len(agreements) if agreements else None,
        "mean_latency_ms": sum(latencies) / len(latencies) if latencies else None,
        "invalid_reasons": dict(reasons.most_common(3)),
    }


BASELINES = ("json", "tfidf")
"""`json`: unconstrained greedy JSON generation by the same model; `tfidf`: a bag of words (word 1-2-grams and
character 2-5-grams, TF-IDF, one logistic regression) fitted on training rows: what the model adds over the words."""


def tfidf_baseline(train: Sequence[LabelledRow], texts: Sequence[Any], gold: Sequence[str], field_name: str,
                   options: Sequence[str], readings: Sequence[Reading]) -> dict[str, Any]:
    """A bag of words fitted on `train`'s labelled rows (the n-gram head's features and regression,
    `fitting.lexical`), scored on the evaluated rows beside the readout, with McNemar's exact test."""
    from ..fitting.lexical import fit_lexicon, fit_words, word_matrix
    from ..runtime.heads.lexical import lexical_text

    labels = list(options)
    fitting = [row for row in train if row.gold.get(field_name) in labels]
    if not fitting:
        raise DataError(f"no training row has a label of field {field_name!r} among its answers ({', '.join(labels[:8])}...)")
    seen = sorted({row.gold[field_name] for row in fitting})
    if len(seen) < 2:
        raise DataError(f"the training rows label field {field_name!r} with one answer only ({seen[0]!r}): a baseline "
                        "needs rows of two answers or more")
    began = time.perf_counter()
    lexicon = fit_lexicon([lexical_text(row.text) for row in fitting])
    head = fit_words(word_matrix(lexicon, [lexical_text(row.text) for row in fitting]),
                     [labels.index(row.gold[field_name]) for row in fitting])
    scores = head.scores(word_matrix(lexicon, [lexical_text(text) for text in texts]))
    predicted = [labels[int(head.classes[i])] for i in scores.argmax(axis=1)]
    baseline = [Reading(predicted=p) for p in predicted]
    offered = set(labels)
    in_scope = [i for i, g in enumerate(gold) if g in offered]
    compared = paired_difference(gold, readings, baseline, options)
    return {
        "method": "tfidf (word 1-2-grams and character 2-5-grams, TF-IDF, logistic regression)",
        "train_rows": len(fitting), "terms": len(lexicon), "n": len(gold), "n_in_scope": len(in_scope),
        "accuracy": _number(metrics.accuracy([gold[i] for i in in_scope], [predicted[i] for i in in_scope])),
        "macro_f1": _number(metrics.macro_f1([gold[i] for i in in_scope], [predicted[i] for i in in_scope])),
        "readout_vs_baseline": {"rows": compared["rows"], "only_readout_right": compared["only_fitted_right"],
                                "only_baseline_right": compared["only_zero_shot_right"], "mcnemar_p": compared["mcnemar_p"]},
        "seconds": round(time.perf_counter() - began, 1),
    }


def with_thresholds(
    base: Calibration | None, rubric: Rubric, field_name: str, *,
    min_mass: float | None, min_probability: float | None,
) -> Calibration | None:
    """`base` with the evaluated field's abstention thresholds replaced where given."""
    if base is None and min_mass is None and min_probability is None:
        return None
    fields = dict(base.fields) if base else {}
    current = fields.get(field_name, FieldCalibration())
    fields[field_name] = current.model_copy(update={
        "min_candidate_mass": current.min_candidate_mass if min_mass is None else min_mass,
        "min_probability": current.min_probability if min_probability is None else min_probability,
    })
    return Calibration(rubric=rubric.name, fields=fields)


@dataclass
class EvalRun:
    """Everything one `decisionflow eval` measured, ready to write."""

    summary: dict[str, Any]
    rows: list[LabelledRow]
    gold: list[str]
    readings: list[Reading]


def evaluate(
    engine: Any, target: Any, rubric: Rubric, rows: Sequence[LabelledRow], field_name: str, *,
    calibration: Calibration | None = None, debias: str | None = None, shuffle_orders: int = 0, seed: int = 0,
    baseline: Sequence[str] = (), ablate: bool = False, progress_for: Callable[[str], Progress | None] | None = None,
    heads: Any = None, train: Sequence[LabelledRow] = (),
) -> EvalRun:
    """Run the engine on `rows` and score it; next to it the raw readout (when a correction applies),
    and optionally option shuffles, the wording ablation and the baselines (`BASELINES`: `json` generates,
    `tfidf` is fitted on `train`).

    `debias` overrides the readout correction (None: what the engine resolves, as `decisionflow run`).
    With fitted `heads` that answer the field, the zero-shot readout of the same passes is scored beside
    the fitted one, with McNemar's exact test of the paired difference (`summary["zero_shot"]`). Where
    the field reads answers a head gave (a later round, or derived from them), that zero-shot side is
    instead a run without heads, read apart: what the engine answers when no head is applied
    (`summary["readout"]` is then `zero_shot_after_fitted` for a field no head answers itself)."""
    progress_for = progress_for or (lambda _label: None)
    texts = [row.text for row in rows]
    gold = [row.gold[field_name] for row in rows]
    options = offered_labels(rubric.field(field_name))
    began = time.perf_counter()
    read = read_rows_raw_and_zero_shot(
        engine, target, texts, field_name, calibration=calibration, debias=debias, progress=progress_for("deciding"),
        heads=heads,
    )
    readings, raw, zero_shot = read.readings, read.raw, read.zero_shot
    score = rubric.field(field_name).kind is FieldKind.SCORE
    summary = score_readings(gold, readings, options, score=score)
    summary["readout"] = ("fitted" if zero_shot is not None
                          else "zero_shot_after_fitted" if read.reads_fitted_answers else "zero_shot")
    if read.reads_fitted_answers:
        # Earlier answers came from heads, which a run without them could answer differently: the
        # zero-shot side is the engine without heads (and without what a calibration fitted after them).
        zero_shot = read_rows(engine, target, texts, field_name, debias=debias,
                              calibration=calibration.without_heads() if calibration is not None else None,
                              progress=progress_for("deciding, zero-shot"))
    if zero_shot is not None:
        summary["zero_shot"] = {
            **{k: v for k, v in score_readings(gold, zero_shot, options, score=score).items() if k != "reliability"},
            "fitted_vs_zero_shot": paired_difference(gold, readings, zero_shot, options),
        }
    summary["debias"] = applied = applied_correction(readings)
    summary["seconds"] = round(time.perf_counter() - began, 1)
    if applied == Debias.NONE.value:
        raw = None  # no correction applied: nothing to show beside the readout
    elif raw is None:
        # The field reads earlier answers, which the raw readout could choose differently: read it apart.
        raw = read_rows(engine, target, texts, field_name, debias=Debias.NONE.value, progress=progress_for("deciding, raw"))
    if raw is not None:
        summary["raw"] = {k: v for k, v in score_readings(gold, raw, options, score=score).items() if k != "reliability"}
    settings = calibration.fields.get(field_name) if calibration else None
    if summary.get("n_out_of_scope") or (settings and (settings.min_candidate_mass is not None or settings.min_probability is not None)):
        summary["abstention"] = {
            "min_candidate_mass": settings.min_candidate_mass if settings else None,
            "min_probability": settings.min_probability if settings else None,
            **score_abstention(gold, readings, options),
        }
    if shuffle_orders:
        compared = [(ReadSetting("readout", debias, calibration), readings)]
        if raw is not None:
            compared.append((ReadSetting("raw", Debias.NONE.value, None), raw))
        by_readout = compare_orders(engine, rubric, texts, gold, options, field_name, compared,
                                    orders=shuffle_orders, seed=seed, progress_for=progress_for)
        summary["shuffle"] = {**by_readout["readout"], **({"raw": by_readout["raw"]} if "raw" in by_readout else {})}
    if ablate:
        correction = ablation_correction(applied)
        known = {("as_written", applied): readings, **({("as_written", Debias.NONE.value): raw} if raw is not None else {})}
        summary["ablate"] = compare_wordings(engine, rubric, texts, gold, options, field_name, correction=correction,
                                             known=known, progress_for=progress_for)
    if "tfidf" in baseline:
        summary["tfidf"] = tfidf_baseline(train, texts, gold, field_name, options, readings)
    if "json" in baseline:
        from ..baselines.generation import json_generate

        report = progress_for("JSON baseline")
        records = []
        began = time.perf_counter()
        for done, text in enumerate(texts, start=1):
            try:
                records.append(json_generate(engine, target, text))
            except DecisionflowError as error:  # e.g. an input too long: that row is invalid, not fatal
                records.append(SimpleNamespace(valid=False, values=None, latency_ms=0.0, reason=str(error)))
            if report:
                report(done, len(texts))
        summary["baseline"] = {
            "method": "json_generate (greedy, unconstrained)",
            **score_baseline(gold, records, field_name, options, readings),
            "seconds": round(time.perf_counter() - began, 1),
        }
    return EvalRun(summary=summary, rows=list(rows), gold=gold, readings=readings)


def write_outputs(run: EvalRun, directory: Path) -> list[Path]:
    """eval.json, rows.jsonl, eval.md and (with matplotlib) reliability.png; returns the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    png = directory / "reliability.png"
    if plot_reliability(run.summary["reliability"], png, title=_title(run.summary)):
        written.append(png)
    elif "matplotlib is not installed: no reliability.png" not in run.summary.get("notes", []):
        run.summary.setdefault("notes", []).append("matplotlib is not installed: no reliability.png")
    path = directory / "eval.json"
    path.write_text(json.dumps(run.summary, indent=2) + "\n", encoding="utf-8")
    written.append(path)
    path = directory / "rows.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for row, gold, reading in zip(run.rows, run.gold, run.readings):
            handle.write(json.dumps({
                "row": row.index, "gold": gold, "predicted": reading.predicted,
                "confidence": reading.confidence, "candidate_mass": reading.candidate_mass,
                "abstained": reading.abstained, "debias": reading.debias,
                **({"error": reading.error} if reading.error else {}),
            }) + "\n")
    written.append(path)
    path = directory / "eval.md"
    path.write_text(markdown_report(run.summary, has_plot=png in written), encoding="utf-8")
    written.append(path)
    return written


def plot_reliability(bins: list[dict[str, Any]], path: Path, *, title: str) -> bool:
    """Draw a reliability diagram; False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axis = plt.subplots(figsize=(4.5, 4.5))
    filled = [b for b in bins if b["count"]]
    axis.bar([b["lower"] for b in filled], [b["accuracy"] for b in filled], width=0.1, align="edge",
             edgecolor="black", alpha=0.7, label="accuracy")
    axis.plot([b["confidence"] for b in filled], [b["confidence"] for b in filled], "o", color="black",
              markersize=3, label="mean confidence")
    axis.plot([0, 1], [0, 1], "--", color="grey", linewidth=1)
    axis.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence (probability of the top label)", ylabel="accuracy",
             title=title)
    axis.legend(loc="upper left")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return True


def _title(summary: dict[str, Any]) -> str:
    return f"{summary.get('rubric', '')} {summary.get('field', '')} (n={summary['n']})".strip()


_READOUT_WORDS = {"fitted": "fitted head, ", "zero_shot_after_fitted": "after fitted fields, "}


def markdown_report(summary: dict[str, Any], *, has_plot: bool) -> str:
    """A short human-readable report of one eval run."""
    lines = [f"# Evaluation: {summary.get('rubric', '?')}, field `{summary.get('field', '?')}`", ""]
    if "data" in summary:
        lines += [f"Data: `{summary['data']}` ({summary['n']} rows; {summary.get('selection', '')}). "
                  f"Model: {summary.get('model', 'bundled')}.", ""]
    readout = f"decisionflow ({_READOUT_WORDS.get(summary.get('readout'), '')}{summary.get('debias', 'none')})"
    methods = ([(readout, summary)]
               + ([(f"decisionflow zero-shot ({summary.get('debias', 'none')})", {**summary["zero_shot"], "n": summary["n"]})]
                  if "zero_shot" in summary else [])
               + ([("decisionflow raw", {**summary["raw"], "n": summary["n"]})] if "raw" in summary else [])
               + ([("JSON baseline", summary["baseline"])] if "baseline" in summary else [])
               + ([("TF-IDF baseline", {**summary["tfidf"], "valid_rate": 1.0, "ece": None, "mean_candidate_mass": None})]
                  if "tfidf" in summary else []))
    lines += ["| method | n | accuracy | macro-F1 | valid rate | ECE | mean candidate mass |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, figures in methods:
        lines.append(f"| {name} | {figures['n']} | {_fmt(figures['accuracy'])} | {_fmt(figures['macro_f1'])} | "
                     f"{_fmt(figures['valid_rate'])} | {_fmt(figures['ece'])} | {_fmt(figures['mean_candidate_mass'])} |")
    lines.append("")
    if "mean_absolute_error" in summary:
        errors = ", ".join(f"{name} {_fmt(figures.get('mean_absolute_error'))}" for name, figures in methods
                           if "mean_absolute_error" in figures)
        lines += [f"Mean absolute error, in levels: {errors}.", ""]
    if "zero_shot" in summary:
        d = summary["zero_shot"]["fitted_vs_zero_shot"]
        lines.append(f"With fitted heads against without, on the same {d['rows']} rows: {d['only_fitted_right']} right "
                     f"only with heads, {d['only_zero_shot_right']} only without (McNemar exact p = {d['mcnemar_p']:.3g}).")
        lines.append("")
    if summary.get("n_out_of_scope"):
        lines.append(f"Accuracy, macro-F1 and ECE are over the {summary['n_in_scope']} in-scope rows; "
                     f"{summary['n_out_of_scope']} rows have a gold label the field does not offer.")
    if "baseline" in summary:
        lines.append(f"The baseline gives no probabilities (no ECE). Agreement with decisionflow's answers: "
                     f"{_fmt(summary['baseline']['agreement_with_decisionflow'])} (over its valid rows).")
        reasons = summary["baseline"].get("invalid_reasons") or {}
        if reasons:
            lines.append("Commonest reasons its answers were invalid: "
                         + "; ".join(f"{reason} ({count})" for reason, count in reasons.items()) + ".")
    if "tfidf" in summary:
        t = summary["tfidf"]
        d = t["readout_vs_baseline"]
        lines.append(f"The TF-IDF baseline was fitted on {t['train_rows']} training rows ({t['terms']} terms). Against it, "
                     f"on the same {d['rows']} rows: {d['only_readout_right']} right only by decisionflow, "
                     f"{d['only_baseline_right']} only by the baseline (McNemar exact p = {d['mcnemar_p']:.3g}).")
    if "abstention" in summary:
        a = summary["abstention"]
        lines += ["", "## Abstention", "",
                  f"Thresholds: min candidate mass {a['min_candidate_mass']}, min probability {a['min_probability']}.",
                  "", "| coverage (in scope) | accuracy on covered | out-of-scope recall | overall accuracy | overall, no abstention |",
                  "| ---: | ---: | ---: | ---: | ---: |",
                  f"| {_fmt(a['coverage'])} | {_fmt(a['covered_accuracy'])} | {_fmt(a['oos_recall'])} | "
                  f"{_fmt(a['overall_accuracy'])} | {_fmt(a.get('overall_accuracy_without_abstention'))} |"]
    if "shuffle" in summary:
        lines += _order_section(summary)
    if "ablate" in summary:
        lines += _wording_section(summary["ablate"])
    if has_plot:
        lines += ["", "![reliability diagram](reliability.png)"]
    for note in summary.get("notes", []):
        lines += ["", f"Note: {note}"]
    return "\n".join(lines) + "\n"


def _order_section(summary: dict[str, Any]) -> list[str]:
    s = summary["shuffle"]
    lines = ["", "## Option order", "",
             f"Re-asked with the options in {s['orders']} shuffled order{'s' if s['orders'] != 1 else ''}.", "",
             "| readout | flip rate per order | rows flipped in any order | accuracy in each order |",
             "| --- | ---: | ---: | --- |"]
    for name, figures in [(summary.get("debias", "none"), s)] + ([("raw", s["raw"])] if "raw" in s else []):
        lines.append(f"| {name} | {_fmt(figures['flip_rate'])} | {_fmt(figures['rows_flipped_in_any_order'])} | "
                     + ", ".join(_fmt(a) for a in figures.get("accuracy_per_order", [])) + " |")
    return lines


def _wording_section(ablate: dict[str, Any]) -> list[str]:
    methods = list(next(iter(ablate["variants"].values())))
    lines = ["", "## Wording", "",
             "The rubric as written against its minimal variant (no instructions, no option descriptions), "
             "without a calibration file.", "",
             "| wording | " + " | ".join(f"accuracy ({m}) | macro-F1 ({m})" for m in methods) + " |",
             "| --- | " + " | ".join("---: | ---:" for _ in methods) + " |"]
    for name, figures in ablate["variants"].items():
        lines.append(f"| {name.replace('_', ' ')} | "
                     + " | ".join(f"{_fmt(figures[m]['accuracy'])} | {_fmt(figures[m]['macro_f1'])}" for m in methods) + " |")
    d = ablate.get("minimal_minus_as_written")
    if d:
        lines += ["", f"Minimal minus as written ({ablate['correction']}): {d['difference']:+.3f} "
                  f"(95 % interval {d['low']:+.3f} to {d['high']:+.3f}: {d['verdict']} for the minimal wording)."]
    return lines


def _fmt(value: Any) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _number(value: float) -> float | None:
    """JSON has no NaN: an undefined figure (no rows) is null."""
    return None if value is None or math.isnan(value) else value
