"""The side-by-side comparisons `decisionflow eval` reports next to its main figures.

- **Option order** (`--shuffle-options K`): the same rows re-asked with the field's options in K
  shuffled orders, once per readout being compared (the corrected readout and the raw one), with the
  same K orders for both. The flip rate is the fraction of rows whose top label differs from the one
  given in the rubric's own order.
- **Wording** (`--ablate`): the rubric as written against its minimal variant (`variants.minimal_rubric`:
  no instructions, no option descriptions), both read raw and under the same readout correction,
  without any calibration file (its numbers belong to the written wording). A domain prior also
  belongs to the written wording, so under `domain` both variants are compared with the content-free
  correction instead. The difference in accuracy comes with its paired-bootstrap 95 % interval.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..fitting.readings import Progress, Reading, read_rows_and_raw
from ..runtime.readout.calibration import Calibration
from ..spec.rubric import Debias, Rubric
from ..stats import metrics
from .significance import paired_difference
from .variants import choice_labels, minimal_rubric, reordered_rubric, shuffled_order

ProgressFor = Callable[[str], "Progress | None"]


@dataclass(frozen=True)
class ReadSetting:
    """One readout being compared: its name in the report and how the engine is asked for it."""

    name: str
    debias: str | None
    calibration: Calibration | None


def shuffled_rubric(rubric: Rubric, field_name: str, rng: random.Random) -> Rubric:
    """The rubric with one choice field's options in a new random order (never the original one)."""
    return reordered_rubric(rubric, field_name, shuffled_order(choice_labels(rubric, field_name), rng))


def score_flips(original: Sequence[Reading], reordered: Sequence[Sequence[Reading]]) -> dict[str, Any]:
    """How often the top label changes when only the order of the options changes."""
    per_order = []
    flipped_any = [False] * len(original)
    for readings in reordered:
        pairs = [(i, a, b) for i, (a, b) in enumerate(zip(original, readings))
                 if a.predicted is not None and b.predicted is not None]
        flips = [i for i, a, b in pairs if a.predicted != b.predicted]
        for i in flips:
            flipped_any[i] = True
        per_order.append(len(flips) / len(pairs) if pairs else None)
    rates = [r for r in per_order if r is not None]
    return {
        "orders": len(reordered),
        "flip_rate": sum(rates) / len(rates) if rates else None,
        "flip_rate_per_order": per_order,
        "rows_flipped_in_any_order": sum(flipped_any) / len(original) if original else None,
    }


def in_scope_figures(gold: Sequence[str], readings: Sequence[Reading], options: Sequence[str]) -> dict[str, float | None]:
    """Accuracy and macro-F1 over the rows whose gold label the field offers."""
    offered = set(options)
    rows = [i for i, g in enumerate(gold) if g in offered]
    if not rows:
        return {"accuracy": None, "macro_f1": None}
    gold_in = [gold[i] for i in rows]
    predicted = [readings[i].predicted for i in rows]
    return {"accuracy": metrics.accuracy(gold_in, predicted), "macro_f1": metrics.macro_f1(gold_in, predicted)}


def compare_orders(
    engine: Any, rubric: Rubric, texts: Sequence[str], gold: Sequence[str], options: Sequence[str], field_name: str,
    compared: Sequence[tuple[ReadSetting, Sequence[Reading]]], *, orders: int, seed: int, progress_for: ProgressFor,
) -> dict[str, dict[str, Any]]:
    """Per compared readout, its flip rate and accuracy over `orders` shuffled orders (the same for all).

    A raw setting (no correction, no calibration) is taken from the same passes as another setting's
    reading of an order where the field is decided in the first round (`read_rows_and_raw`)."""
    rng = random.Random(seed)
    shuffled = [shuffled_rubric(rubric, field_name, rng) for _ in range(orders)]
    raw_setting = next((s for s, _ in compared if s.debias == Debias.NONE.value and s.calibration is None), None)
    reads: dict[tuple[int, str], Sequence[Reading]] = {}
    for k, variant in enumerate(shuffled):
        for setting, _ in compared:
            if (k, setting.name) in reads:
                continue
            readings, raw = read_rows_and_raw(
                engine, variant, texts, field_name, calibration=setting.calibration, debias=setting.debias,
                progress=progress_for(f"order {k + 1}/{orders}, {setting.name}"),
            )
            reads[(k, setting.name)] = readings
            if raw is not None and raw_setting is not None and setting is not raw_setting:
                reads[(k, raw_setting.name)] = raw
    result = {}
    for setting, original in compared:
        reordered = [reads[(k, setting.name)] for k in range(len(shuffled))]
        flips = score_flips(original, reordered)
        flips["accuracy_per_order"] = [in_scope_figures(gold, r, options)["accuracy"] for r in reordered]
        result[setting.name] = flips
    return result


def ablation_correction(applied: str) -> str:
    """The correction both wordings are compared under: the readout's, except a domain prior (which
    belongs to the written wording), replaced by the content-free correction."""
    return Debias.CONTENT_FREE.value if applied == Debias.DOMAIN.value else applied


def compare_wordings(
    engine: Any, rubric: Rubric, texts: Sequence[str], gold: Sequence[str], options: Sequence[str], field_name: str, *,
    correction: str, known: dict[tuple[str, str], Sequence[Reading]], progress_for: ProgressFor,
) -> dict[str, Any]:
    """The rubric as written and its minimal variant, raw and under `correction`.

    `known` holds readings already taken, keyed by (`as_written`, correction), so they are not read twice."""
    variants = {"as_written": rubric, "minimal": minimal_rubric(rubric)}
    methods = list(dict.fromkeys([Debias.NONE.value, correction]))
    figures: dict[str, dict[str, Any]] = {}
    predictions: dict[tuple[str, str], list[str | None]] = {}
    offered = set(options)
    rows = [i for i, g in enumerate(gold) if g in offered]
    taken = dict(known)
    for name, variant in variants.items():
        # The corrected reading first: for a first-round field its passes also give the raw one.
        for method in reversed(methods):
            readings = taken.get((name, method))
            if readings is None:
                readings, raw = read_rows_and_raw(engine, variant, texts, field_name, debias=method,
                                                  progress=progress_for(f"{name.replace('_', ' ')} wording, {method}"))
                if raw is not None:
                    taken.setdefault((name, Debias.NONE.value), raw)
            figures.setdefault(name, {})[method] = in_scope_figures(gold, readings, options)
            predictions[(name, method)] = [readings[i].predicted for i in rows]
        figures[name] = {method: figures[name][method] for method in methods}
    result: dict[str, Any] = {"correction": correction, "variants": figures}
    if rows:
        result["minimal_minus_as_written"] = paired_difference(
            [gold[i] for i in rows], predictions[("minimal", correction)], predictions[("as_written", correction)]
        ).to_dict()
    return result
