"""Choosing per field between zero-shot and a fitted head, on the rows' out-of-fold answers (stratified
cross-validation on the same rows). The readouts compared:

- `zero_shot`: the engine's readout (its correction applied), which needs no fitting;
- `fitted`: the multinomial head, reading the hidden states and the zero-shot log-probabilities;
- `ngram` and `fused` (choice and boolean fields, with a lexicon): the n-gram head on the rows' words,
  and the fusion of the heads' and the zero-shot readout's log-probabilities;
- `ordinal` (score fields): the level regressed on the same features (`training`).

The field keeps the head only when it is right on more rows across folds than zero-shot and McNemar's
exact p of that difference (`stats.mcnemar`) is below `significance` (0.05; 1 keeps any win); otherwise
zero-shot. A score field's head must instead be nearer the gold level on average, with Wilcoxon's
signed-rank test on the paired errors below `significance`; of its heads that do, the nearer is kept
unless the other is right on significantly more rows (`_kept_head`). Each candidate's figure comes with
its 95 % Wilson interval and its p against zero-shot on the same rows. A field with fewer than
`min_rows_per_label` rows for some answer gets no head; a score field gets its heads from
`MIN_ORDINAL_ROWS` rows over two levels (the multinomial one where two levels have `min_rows_per_label`
rows, never answering a level without rows). A field with no head to try keeps zero-shot, and the
result's warnings say how many more rows it needs.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

from ..errors import Unavailable
from ..runtime.heads.fitted import Candidate, FieldHead, FieldHeadInfo, NgramHead
from ..runtime.heads.lexical import Lexicon
from ..spec.kinds import FieldKind
from ..spec.rubric import Rubric
from ..stats import fit_score_temperature, mcnemar
from .features import FieldData, head_features
from .lexical import fit_words, word_matrix
from .training import (
    FUSION_START,
    MEAN_FUSION_START,
    ORDINAL_PENALTIES,
    TEMPERATURE_LOG_BOUNDS,
    UNSEEN_BIAS,
    PathHead,
    fit_fusion,
    fit_ordinal,
    fit_path,
    fit_spread,
    fused,
    out_of_fold,
    row_log_softmax,
)

MIN_ROWS_PER_LABEL = 2
"""Fewer labelled rows than this for some answer of a field, and the field keeps zero-shot."""
MAX_FOLDS = 5
SIGNIFICANCE = 0.05
"""A head replaces the zero-shot readout only when it is right on more rows across folds (a score: nearer
the gold level on average) and McNemar's exact test (a score: Wilcoxon's signed-rank test on the paired
errors) puts the difference below this p: a win of a row or two is noise, not evidence."""
MIN_ORDINAL_ROWS = 10
"""A score field's ordinal head needs this many labelled rows, over at least two levels (no row is
needed at every level: a level is a point on a line, not a class of its own)."""


@dataclass(frozen=True)
class FieldFit:
    """What a field's fit keeps: its hidden-state head, its n-gram head (None where unused)."""

    hidden: FieldHead | None = None
    words: NgramHead | None = None
    input_mean: FieldHead | None = None
    """A fused head's input-mean member."""

    @property
    def any(self) -> bool:
        return self.hidden is not None or self.words is not None


def fit_field(
    rubric: Rubric, name: str, data: FieldData, *, layers: tuple[int, ...], zero_shot_features: bool,
    min_rows_per_label: int, regularisation: Sequence[float], folds: int, seed: int,
    significance: float = SIGNIFICANCE, lexicon: Lexicon | None = None, mean_layers: tuple[int, ...] = (),
) -> tuple[FieldHeadInfo, FieldFit, str]:
    """One field's fit: its info (candidates, choice), its heads when a fitted one wins, and a warning line.

    With a `lexicon`, a choice or boolean field also cross-validates an n-gram head on the rows' words
    (`fitting.lexical`) and the fusion of the hidden-state head's, the n-gram head's and the zero-shot
    readout's log-probabilities, weighted as fitted on the out-of-fold log-probabilities (`fit_fusion`);
    of the heads that beat zero-shot, the most accurate answers. With `mean_layers` (and every row's
    input mean read there), the fusion has a fourth member: the same multinomial head on the input's
    mean hidden state at those layers (with the zero-shot log-probabilities as the hidden-state head has them).

    A score field cross-validates an ordinal head beside the multinomial one (and alone, where fewer
    than two levels have rows enough for the multinomial one); of those that beat zero-shot, the nearer
    the gold levels is kept unless the other is right on significantly more rows (`_better_head`). A
    score's head is compared with zero-shot by distance to the gold level: a smaller mean absolute
    error, with Wilcoxon's signed-rank test on the paired errors significant. An answer four levels off is worse than one level off; exact
    agreement alone cannot see that (ranked by exact agreement, 30 rated tweets kept zero-shot, 3.7
    levels off on average, against a head 0.9 levels off: docs/fitting.md)."""
    spec = rubric.fields[name]
    labels = spec.labels
    score = spec.kind is FieldKind.SCORE
    levels = [int(label) for label in labels] if score else None
    counts = {label: 0 for label in labels}
    for index in data.gold:
        counts[labels[index]] += 1
    base = dict(labels=tuple(labels), layers=layers, zero_shot_features=zero_shot_features, rows=len(data.gold),
                rows_per_label=counts)
    zero_shot_right = [a == g for a, g in zip(data.zero_shot_answer, data.gold)]
    candidates = {"zero_shot": _candidate(zero_shot_right, errors=_errors(levels, data.zero_shot_answer, data.gold))
                  } if data.gold else {}
    short = {label: n for label, n in counts.items() if n < min_rows_per_label}
    ordinal = score and _ordinal_fits(counts)
    # A score's multinomial head needs rows at two levels; the levels without them are never answered
    # (a level is a point on a line: the data of a 0-9 scale rarely has a 9). Any other field's needs
    # rows at every answer.
    multinomial = (not short) if not score else (
        ordinal and sum(1 for n in counts.values() if n >= min_rows_per_label) >= 2)
    if not (multinomial or ordinal):
        note = _too_few_rows(labels, counts, short, min_rows_per_label, score=score)
        return (FieldHeadInfo(readout="zero_shot", candidates=candidates, note=note, **base), FieldFit(),
                f"warning: field {name!r} keeps the zero-shot readout: {note}")
    words = word_matrix(lexicon, data.texts) if lexicon is not None and not score and multinomial else None
    try:
        import numpy as np
        from sklearn.model_selection import KFold, StratifiedKFold
        from threadpoolctl import threadpool_limits
    except ImportError as error:
        raise Unavailable(f"fitting heads needs scikit-learn ({error.name} is missing): pip install scikit-learn") from None
    features = head_features(data.hidden, data.zero_shot if zero_shot_features else None)
    mean_features = None
    if words is not None and mean_layers and len(data.input_mean) == len(data.gold):
        mean_features = head_features(data.input_mean, data.zero_shot if zero_shot_features else None)
    gold = np.asarray(data.gold)
    if short:  # some level has too few rows to stratify on (a score field)
        splits = min(folds, len(gold))
        cv: Any = KFold(n_splits=splits, shuffle=True, random_state=seed)
    else:
        splits = max(2, min(folds, min(counts.values())))
        cv = StratifiedKFold(n_splits=splits, shuffle=True, random_state=seed)
    folded = list(cv.split(features, gold))
    tried: dict[str, Any] = {}
    # One BLAS thread: these products are small, and two threads made the fits three times slower
    # (15.4 s against 5.1 s for BANKING77's 1,540 rows on two cores).
    with warnings.catch_warnings(), threadpool_limits(1):
        # Folds with one row of some answer, or a fold stopped at max_iter, are expected with few rows:
        # the cross-validated figure is the evidence, not the optimiser's warnings.
        warnings.simplefilter("ignore")
        def path(x: Any, y: Any) -> PathHead:
            return fit_path(x, y, regularisation)

        if multinomial:
            held_out = out_of_fold(path, features, gold, folded, len(labels))
            tried["fitted"] = held_out
        if words is not None:
            held_words = out_of_fold(fit_words, words, gold, folded, len(labels))
            tried["ngram"] = held_words
            temperatures = {"fitted": fit_score_temperature(held_out, gold), "ngram": fit_score_temperature(held_words, gold)}
            parts = [row_log_softmax(held_out / temperatures["fitted"]), row_log_softmax(held_words / temperatures["ngram"]),
                     torch.stack(data.zero_shot).double().numpy()]
            start = list(FUSION_START)
            if mean_features is not None:
                held_means = out_of_fold(path, mean_features, gold, folded, len(labels))
                temperatures["input_mean"] = fit_score_temperature(held_means, gold)
                parts.append(row_log_softmax(held_means / temperatures["input_mean"]))
                start.append(MEAN_FUSION_START)
            fusion = fit_fusion(parts, gold, start=start)
            tried["fused"] = fused(fusion, *parts)
        if ordinal:
            values = np.asarray(levels, dtype=float)
            predicted = np.zeros(len(gold))
            for train, test in folded:
                predicted[test] = fit_ordinal(features[train], values[gold[train]]).predict(features[test])
            tried["ordinal"] = predicted
        zero_shot_errors = _errors(levels, data.zero_shot_answer, data.gold)
        errors: dict[str, list[int] | None] = {}
        for readout, held in tried.items():
            answers = (held.argmax(axis=1) if readout != "ordinal"
                       else np.abs(held[:, None] - values[None, :]).argmin(axis=1))
            errors[readout] = _errors(levels, answers.tolist(), data.gold)
            candidates[readout] = _candidate((answers == gold).tolist(), zero_shot_right, errors=errors[readout],
                                             zero_shot_errors=zero_shot_errors)
        best, wins = _kept_head(candidates, errors, score=score, significance=significance)
        chosen_figure = candidates[best]
        better = _rank(chosen_figure, score=score) < _rank(candidates["zero_shot"], score=score)
        head, word_head, mean_head, spread, temperature = None, None, None, None, 1.0
        if wins and best in ("fitted", "fused"):
            temperature = fit_score_temperature(tried["fitted"], gold, log_bounds=TEMPERATURE_LOG_BOUNDS)
            head = path(features, gold).head(temperature, len(labels))
        if wins and best in ("ngram", "fused"):
            word_head = NgramHead(*fit_words(words, gold).tensors(temperatures["ngram"], len(labels), UNSEEN_BIAS))
        elif wins and best == "ordinal":
            spread = fit_spread(tried["ordinal"], gold, values)
            head = fit_ordinal(features, values[gold]).head(values, spread)
        if wins and best == "fused" and mean_features is not None:
            mean_head = path(mean_features, gold).head(temperatures["input_mean"], len(labels))
    test = "Wilcoxon" if score else "McNemar"
    note = "" if wins else (
        (f"the zero-shot readout was at least as {'near the gold level' if score else 'accurate'} "
         "across folds") if not better
        else f"the head's gain across folds was not significant ({test} p = {chosen_figure.p_vs_zero_shot:.2g}, "
             f"needs < {significance})")
    kinds = {"ordinal": "ordinal", "ngram": "ngram", "fused": "fused"}
    info = FieldHeadInfo(
        readout="fitted" if wins else "zero_shot", head=kinds.get(best, "multinomial"),
        regularisation=tuple(regularisation) if multinomial else (),
        penalties=ORDINAL_PENALTIES if ordinal else (), temperature=temperature, spread=spread, folds=splits,
        fusion=tuple(float(w) for w in fusion) if wins and best == "fused" else None,
        mean_layers=tuple(mean_layers) if mean_head is not None else (),
        why=_why(best, candidates, score=score) if wins else "",
        candidates=candidates, **base, note=note)
    fitted = FieldFit(head, word_head, mean_head)
    return info, fitted, _overconfidence_warning(name, fitted.any and candidates[best].accuracy == 1.0,
                                                 head is not None and best in ("fitted", "fused") and temperature
                                                 <= math.exp(TEMPERATURE_LOG_BOUNDS[0]) * (1 + 1e-3))


def _candidate(right: Sequence[bool], zero_shot_right: Sequence[bool] | None = None, *,
               errors: Sequence[int] | None = None, zero_shot_errors: Sequence[int] | None = None) -> Candidate:
    """A readout's figure. Its p against zero-shot: McNemar's exact test on right and wrong, or for a
    score field (`errors` given) Wilcoxon's signed-rank test on the paired absolute errors."""
    from scipy.stats import binomtest

    n, k = len(right), sum(right)
    interval = binomtest(k, n).proportion_ci(method="wilson") if n else None
    p = None
    if zero_shot_right is not None and errors is not None and zero_shot_errors is not None:
        p = _wilcoxon(errors, zero_shot_errors)
    elif zero_shot_right is not None:
        p = mcnemar(right, zero_shot_right).p
    return Candidate(accuracy=k / n if n else 0.0, low=interval.low if interval else 0.0,
                     high=interval.high if interval else 0.0, rows=n, p_vs_zero_shot=p,
                     mean_absolute_error=sum(errors) / len(errors) if errors else None)


def _errors(levels: Sequence[int] | None, answers: Sequence[int], gold: Sequence[int]) -> list[int] | None:
    """A score field's absolute error per row, in levels (None for other kinds)."""
    if levels is None:
        return None
    return [abs(levels[a] - levels[g]) for a, g in zip(answers, gold)]


def _rank(figure: Candidate, *, score: bool) -> tuple[float, float]:
    """Smaller is better: a score's mean absolute error then its accuracy; any other field's accuracy."""
    if score:
        return (figure.mean_absolute_error or 0.0, -figure.accuracy)
    return (-figure.accuracy, 0.0)


def _kept_head(candidates: Mapping[str, Candidate], errors: Mapping[str, list[int] | None], *, score: bool,
               significance: float) -> tuple[str, bool]:
    """The head to keep and whether it replaces zero-shot: the better (`_better_head`) of the heads that
    beat zero-shot; where none does, the better of all, which the report says fell short."""
    beating = {readout: e for readout, e in errors.items()
               if _beats(candidates[readout], candidates["zero_shot"], score=score, significance=significance)}
    return _better_head(candidates, beating or errors, significance), bool(beating)


def _beats(figure: Candidate, zero_shot: Candidate, *, score: bool, significance: float) -> bool:
    """Better than zero-shot across folds (a score: nearer on average; else more often right), and
    significantly so (`significance` 1 keeps any win: the p of a narrow win can be exactly 1)."""
    better = _rank(figure, score=score) < _rank(zero_shot, score=score)
    return better and (significance >= 1 or (figure.p_vs_zero_shot is not None and figure.p_vs_zero_shot < significance))


def _better_head(candidates: Mapping[str, Candidate], errors: Mapping[str, list[int] | None], significance: float) -> str:
    """Of the heads tried, a score's the one nearer the gold levels (ties: the more accurate), unless
    the other is right on significantly more rows (McNemar's exact test on the paired rows); any other
    field's, the more accurate. Measured on rated sentiment: with 30-100 rows the ordinal head was
    nearer on all four sets, and from 300 rows the two were equally near while the multinomial head
    was right on up to 13 points more rows on three of them (docs/fitting.md)."""
    def rank(readout: str) -> tuple[float, float]:
        return _rank(candidates[readout], score=errors[readout] is not None)

    heads = sorted(errors, key=rank)
    best = heads[0]
    for other in heads[1:]:
        mine, theirs = errors[best], errors[other]
        if mine is None or theirs is None or candidates[other].accuracy <= candidates[best].accuracy:
            continue
        if significance >= 1 or mcnemar([t == 0 for t in theirs], [m == 0 for m in mine]).p < significance:
            best = other
    return best


def _wilcoxon(errors: Sequence[int], baseline: Sequence[int]) -> float:
    """Wilcoxon's signed-rank p of paired absolute errors (rows where they are equal left out)."""
    from scipy.stats import wilcoxon

    differences = [a - b for a, b in zip(errors, baseline) if a != b]
    return float(wilcoxon(differences).pvalue) if differences else 1.0


def _ordinal_fits(counts: Mapping[str, int]) -> bool:
    """Enough rows for an ordinal head: MIN_ORDINAL_ROWS over at least two levels."""
    return sum(counts.values()) >= MIN_ORDINAL_ROWS and sum(1 for n in counts.values() if n) >= 2


def _too_few_rows(labels: Sequence[str], counts: Mapping[str, int], short: Mapping[str, int], minimum: int,
                  *, score: bool) -> str:
    if score:
        rows, levels = sum(counts.values()), sum(1 for n in counts.values() if n)
        more = max(MIN_ORDINAL_ROWS - rows, 0)
        fix = (f"{more} more rows" if more else "rows") + (" at another level" if levels < 2 else "")
        return (f"{rows} labelled rows at {levels} of {len(labels)} levels; a score's head needs at least "
                f"{MIN_ORDINAL_ROWS} rows over two levels or more: {fix} would let a head be fitted")
    needed = sum(minimum - n for n in short.values())
    worst = ", ".join(f"{label} ({n})" for label, n in list(short.items())[:5])
    more = f" and {len(short) - 5} more" if len(short) > 5 else ""
    return (f"{len(short)} of {len(labels)} answers have fewer than {minimum} labelled rows: "
            f"{worst}{more}; {needed} more rows would let a head be fitted")


def _overconfidence_warning(name: str, all_right: bool, at_bound: bool) -> str:
    """Every out-of-fold answer right: the log-loss falls without end as the temperature (or an ordinal
    head's spread) does, so the search stops where it flattens and the head is as sure as it can be;
    a temperature at its search's lower end says the same of the rows it was fitted on."""
    if not (all_right or at_bound):
        return ""
    why = ("every cross-validated answer of its head was right, so nothing limits its confidence" if all_right
           else "its temperature stopped at the lower end of its search")
    return (f"warning: field {name!r}: {why}: its probabilities sit near 0 and 1 and overstate its certainty on "
            "inputs unlike its rows; fit on more varied rows, or calibrate on rows held out from the fit")


def _why(best: str, candidates: Mapping[str, Candidate], *, score: bool) -> str:
    """Why the head that answers was kept: its figure against zero-shot's and the other heads'."""
    figure = candidates[best]
    measure = "mean absolute error" if score else "accuracy"

    def shown(candidate: Candidate) -> str:
        return f"{candidate.mean_absolute_error:.3f}" if score and candidate.mean_absolute_error is not None else f"{candidate.accuracy:.3f}"

    others = ", ".join(f"{name} {shown(c)}" for name, c in candidates.items() if name != best)
    p = f", p = {figure.p_vs_zero_shot:.2g} against zero-shot" if figure.p_vs_zero_shot is not None else ""
    return f"the best cross-validated {measure}: {best} {shown(figure)}{p} ({others})"
