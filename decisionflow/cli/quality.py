"""`decisionflow eval` and `decisionflow calibrate`: quality measured on labelled rows (CSV, JSONL, Parquet).

Registered in cli.py. The data and the rubric are checked before the model loads, so a wrong column
name costs nothing and is reported in one line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from ..errors import CalibrationError, DataError
from ..quality.labelled import (
    LabelledRow,
    gold_warnings,
    load_labelled,
    parse_slice,
    resolve_fields,
    select_rows,
)
from ..spec.text import listing
from .common import (
    AdapterOption,
    CalibrationOption,
    DataOption,
    DeviceOption,
    DtypeOption,
    HeadsOption,
    LoaderOption,
    ModelOption,
    NoAdapterOption,
    NoCalibrationOption,
    NoHeadsOption,
    RubricRef,
    TextColumnOption,
    ThreadsOption,
    check_calibration,
    chosen_adapter,
    chosen_calibration,
    chosen_heads,
    count,
    guarded,
    load_engine,
    load_target_and_rubric,
    progress_bars,
    refuse_output,
    saved_beside,
    say,
    stderr,
)

LimitOption = Annotated[
    int | None,
    typer.Option(min=1, metavar="N", help="Use a reproducible random sample of N rows (file order kept).", show_default=False),
]
SeedOption = Annotated[int, typer.Option(help="Seed of the --limit sample.")]
RowsOption = Annotated[
    str | None,
    typer.Option("--rows", metavar="START:STOP", help="Only data rows START..STOP-1 (0-based), before --limit; "
                 "e.g. fit on 0:425 and evaluate on 425:.", show_default=False),
]
MinMassOption = Annotated[
    float | None,
    typer.Option("--min-mass", min=0.0, max=1.0, help="Abstain when the field's candidate mass is below this.", show_default=False),
]
MinProbabilityOption = Annotated[
    float | None,
    typer.Option("--min-probability", min=0.0, max=1.0, help="Abstain when the top label's probability is below this.", show_default=False),
]

DebiasOption = Annotated[
    str | None,
    typer.Option("--debias", metavar="METHOD", help="The readout correction: none, content_free, content_free_half or domain (default: the one "
                 "recorded in the calibration file, else the field's, the rubric's or the engine's).", show_default=False),
]


def eval_command(
    ctx: typer.Context,
    rubric_ref: RubricRef,
    data: DataOption,
    field: Annotated[str | None, typer.Option(help="The field to score (default: the rubric's first field).", show_default=False)] = None,
    text_column: TextColumnOption = "text",
    label_column: Annotated[
        str | None,
        typer.Option("--label-column", help="Column holding the gold label (default: a column named after the field, else `label`).", show_default=False),
    ] = None,
    limit: LimitOption = None,
    seed: SeedOption = 0,
    rows: RowsOption = None,
    min_mass: MinMassOption = None,
    min_probability: MinProbabilityOption = None,
    calibration_path: CalibrationOption = None,
    no_calibration: NoCalibrationOption = False,
    raw: Annotated[bool, typer.Option("--raw", help="Score the model's own probabilities: no calibration file, no fitted heads "
                                      "and, unless --debias says otherwise, no readout correction.")] = False,
    shuffle_options: Annotated[
        int, typer.Option("--shuffle-options", min=0, metavar="K", help="Re-ask with the field's options in K shuffled orders and report the flip rate.")
    ] = 0,
    baseline: Annotated[list[str] | None, typer.Option(
        "--baseline", metavar="json|tfidf",
        help="Also score a baseline on the same rows; repeat for both: `json`, unconstrained greedy JSON generation by the "
             "same model (slow); `tfidf`, a bag of words (word and character n-grams, TF-IDF, logistic regression) "
             "fitted on --train, with McNemar's test against the readout.", show_default=False)] = None,
    train: Annotated[Path | None, typer.Option(
        "--train", help="Labelled training rows for `--baseline tfidf` (CSV, JSONL or Parquet; the same text and label "
                        "columns as --data).", show_default=False)] = None,
    debias: DebiasOption = None,
    ablate: Annotated[
        bool, typer.Option("--ablate", help="Also score the rubric's minimal variant (no instructions, no option descriptions) on the same rows.")
    ] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Write eval.json, eval.md, rows.jsonl and reliability.png here.", show_default=False)] = None,
    heads_path: HeadsOption = None,
    no_heads: NoHeadsOption = False,
    adapter_path: AdapterOption = None,
    no_adapter: NoAdapterOption = False,
    model: ModelOption = None,
    device: DeviceOption = "auto",
    dtype: DtypeOption = "auto",
    loader: LoaderOption = "auto",
    threads: ThreadsOption = None,
) -> None:
    """Score a rubric against labelled data: accuracy, macro-F1, calibration error, abstention; raw and debiased side by side."""
    from ..quality.evaluate import BASELINES, evaluate, with_thresholds, write_outputs

    err = stderr()
    refuse_output(err, out, folder=True, option="--out")
    baselines = list(dict.fromkeys(baseline or ()))
    unknown = [name for name in baselines if name not in BASELINES]
    if unknown:
        say(err, f"error: --baseline {unknown[0]!r} is not one (use {' or '.join(BASELINES)})")
        raise typer.Exit(2)
    if ("tfidf" in baselines) != (train is not None):
        say(err, "error: --baseline tfidf needs --train (the labelled rows it is fitted on)" if train is None
                 else "error: --train gives the rows `--baseline tfidf` is fitted on; add --baseline tfidf")
        raise typer.Exit(2)
    method = guarded(ctx, err, lambda: _debias(debias))
    if raw and method is None:
        method = "none"
    target, rubric = load_target_and_rubric(ctx, rubric_ref, err)
    fields = guarded(ctx, err, lambda: resolve_fields(rubric, [field] if field else None))
    chosen = guarded(ctx, err, lambda: _rows(data, rubric, fields, text_column, [label_column] if label_column else None,
                                             rows, limit, seed, err))
    training = [] if train is None else guarded(ctx, err, lambda: _rows(
        train, rubric, fields, text_column, [label_column] if label_column else None, None, None, seed, err))
    base, base_file = (None, None) if raw else guarded(ctx, err, lambda: chosen_calibration(rubric_ref, calibration_path, no_calibration))
    heads, heads_file = (None, None) if raw else guarded(ctx, err, lambda: chosen_heads(rubric_ref, heads_path, no_heads, rubric))
    if base is not None:
        guarded(ctx, err, lambda: check_calibration(base, base_file, rubric, heads))
        say(err, f"calibration: {base_file} ({', '.join(base.fields)})")
    adapter, _ = (None, None) if raw else guarded(ctx, err, lambda: chosen_adapter(rubric_ref, adapter_path, no_adapter))
    fitting_rows = _fitting_rows(heads, chosen)
    calibration = with_thresholds(base, rubric, fields[0], min_mass=min_mass, min_probability=min_probability)
    engine = guarded(ctx, err, lambda: _engine(err, model, threads, device, dtype, loader, generates="json" in baselines))
    if adapter is not None:
        engine = guarded(ctx, err, lambda: engine.with_adapter(adapter))
        say(err, f"adapter: {adapter.describe()}")
    if heads is not None:
        guarded(ctx, err, lambda: engine.check_heads(heads, target))
        say(err, f"heads: {heads_file} (fitted: {', '.join(heads.fitted_fields) or 'none'})")
    with progress_bars(err) as progress_for:
        run = guarded(ctx, err, lambda: evaluate(
            engine, target, rubric, chosen, fields[0], calibration=calibration, debias=method,
            shuffle_orders=shuffle_options, seed=seed, baseline=baselines, ablate=ablate, progress_for=progress_for,
            heads=heads, train=training,
        ))
    run.summary = {
        "rubric": rubric.name, "field": fields[0], "data": str(data), "model": model or "bundled SmolLM2-135M-Instruct",
        "selection": _selection(rows, limit, seed), "calibration": (calibration.model_dump() if calibration else None),
        "heads": str(heads_file) if heads is not None else None,
        **run.summary,
    }
    _warn_failed_rows(err, run)
    if fitting_rows is not None and run.summary["readout"] != "zero_shot":
        # Only where the heads answered the field or an answer it read do their training rows matter.
        run.summary["rows_heads_were_fitted_on"] = len(fitting_rows)
        _warn_fitting_rows(err, fitting_rows, chosen, heads_file, "scored")
    if out is not None:
        written = guarded(ctx, err, lambda: write_outputs(run, out))
        say(err, "wrote " + ", ".join(str(p) for p in written))
    _print_summary(run.summary)


def calibrate_command(
    ctx: typer.Context,
    rubric_ref: RubricRef,
    data: Annotated[
        Path | None,
        typer.Option("--data", help="Labelled rows (CSV, JSONL or Parquet): fit a temperature (and thresholds) after the readout correction.", show_default=False),
    ] = None,
    unlabelled: Annotated[
        Path | None,
        typer.Option("--unlabelled", help="Unlabelled inputs (CSV, JSONL or Parquet; a text column): fit a domain prior for each field and "
                     "record `debias: domain` (before the temperature when --data is also given).", show_default=False),
    ] = None,
    field: Annotated[
        list[str] | None,
        typer.Option("--field", help="A field to calibrate; repeat for several (default: the rubric's first field).", show_default=False),
    ] = None,
    text_column: TextColumnOption = "text",
    label_column: Annotated[
        list[str] | None,
        typer.Option("--label-column", help="Gold column, one per --field in order (default: a column named after "
                     "each field, else `label`).", show_default=False),
    ] = None,
    limit: LimitOption = None,
    seed: SeedOption = 0,
    rows: RowsOption = None,
    min_mass: MinMassOption = None,
    min_probability: MinProbabilityOption = None,
    fit_min_mass: Annotated[
        bool,
        typer.Option("--fit-min-mass", help="Fit the minimum candidate mass that maximises accuracy when rows whose gold "
                     "label is not offered count as right only if they abstain."),
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option("--output", help="Where to save the calibration (default: beside a YAML rubric file; required for a "
                     "shipped workflow's name or module:Class).", show_default=False),
    ] = None,
    debias: DebiasOption = None,
    heads_path: HeadsOption = None,
    no_heads: NoHeadsOption = False,
    adapter_path: AdapterOption = None,
    no_adapter: NoAdapterOption = False,
    model: ModelOption = None,
    device: DeviceOption = "auto",
    dtype: DtypeOption = "auto",
    loader: LoaderOption = "auto",
    threads: ThreadsOption = None,
) -> None:
    """Fit a per-field domain prior from unlabelled inputs and/or a temperature (and abstention thresholds)
    from labelled data, and save them beside the rubric."""
    from ..fitting.domain_prior import fit_domain_priors
    from ..fitting.temperatures import fit_calibration
    from ..runtime.readout.calibration import Calibration

    err = stderr()
    if fit_min_mass and min_mass is not None:
        say(err, "error: give --min-mass or --fit-min-mass, not both")
        raise typer.Exit(2)
    if data is None and unlabelled is None:
        say(err, "error: give --data (labelled rows) or --unlabelled (inputs without labels), or both")
        raise typer.Exit(2)
    if data is None and (fit_min_mass or min_mass is not None or min_probability is not None):
        say(err, "error: --min-mass, --min-probability and --fit-min-mass are fitted with --data (labelled rows)")
        raise typer.Exit(2)
    method = guarded(ctx, err, lambda: _debias(debias))
    output = output or saved_beside(err, rubric_ref, "calibration", Calibration.path_for)
    refuse_output(err, output, folder=False, option="--output")
    if problem := Calibration.save_problem(output):
        say(err, f"error: --output {problem}")
        raise typer.Exit(2)
    target, rubric = load_target_and_rubric(ctx, rubric_ref, err)
    fields = guarded(ctx, err, lambda: _read_fields(rubric, resolve_fields(rubric, field)))
    texts = None if unlabelled is None else guarded(ctx, err, lambda: _texts(unlabelled, text_column, rows, limit, seed))
    chosen = None if data is None else guarded(ctx, err, lambda: _rows(data, rubric, fields, text_column, label_column,
                                                                       rows, limit, seed, err))
    calibration = guarded(ctx, err, lambda: _existing_calibration(output, rubric))
    heads, heads_file = guarded(ctx, err, lambda: chosen_heads(rubric_ref, heads_path, no_heads, rubric))
    if chosen is not None:
        fitting_rows = _fitting_rows(heads, chosen)
        if fitting_rows and any(name in heads.fitted_fields for name in fields):
            _warn_fitting_rows(err, fitting_rows, chosen, heads_file, "calibrated on")
    adapter, _ = guarded(ctx, err, lambda: chosen_adapter(rubric_ref, adapter_path, no_adapter))
    engine = guarded(ctx, err, lambda: _engine(err, model, threads, device, dtype, loader))
    if adapter is not None:
        # A calibration fitted here corrects the adapted readout, the one run and serve read beside it.
        engine = guarded(ctx, err, lambda: engine.with_adapter(adapter))
        say(err, f"adapter: {adapter.describe()}")
    if heads is not None:
        guarded(ctx, err, lambda: engine.check_heads(heads, target))
        after_head = [name for name in fields if name in heads.fitted_fields]
        if chosen is not None:
            say(err, f"heads: {heads_file} (the temperature of {', '.join(after_head) or 'no field calibrated here'} is "
                     "fitted after the head)")
        else:
            say(err, f"heads: {heads_file} (fitted: {', '.join(heads.fitted_fields) or 'none'})")
        if texts is not None and after_head:
            say(err, f"warning: the domain prior corrects the zero-shot readout, but {', '.join(after_head)} "
                     f"{'is' if len(after_head) == 1 else 'are'} answered by {heads_file.name}, whose head keeps its "
                     "own correction: the prior changes those answers only under --no-heads")
    out = Console()
    if texts is not None:
        with progress_bars(err) as progress_for:
            calibration, priors = guarded(ctx, err, lambda: fit_domain_priors(
                engine, target, rubric, texts, fields, base=calibration, progress=progress_for("deciding, unlabelled"),
            ))
        for prior in priors:
            _print_line(out, _prior_line(prior))
    fits = []
    if chosen is not None:
        with progress_bars(err) as progress_for:
            calibration, fits = guarded(ctx, err, lambda: fit_calibration(
                engine, target, rubric, chosen, fields, min_mass=min_mass, min_probability=min_probability,
                fit_min_mass=fit_min_mass, base=calibration, debias=method, progress=progress_for("deciding"),
                heads=heads,
            ))
    guarded(ctx, err, lambda: calibration.save(output))
    for fit in fits:
        s = fit.settings
        _print_line(
            out,
            f"{fit.field}: temperature {s.temperature:.3f} on {fit.rows} rows after the {fit.debias} correction; "
            f"ECE {_fmt(fit.ece_before)} -> {_fmt(fit.ece_after)}, "
            f"NLL {_fmt(fit.nll_before)} -> {_fmt(fit.nll_after)}; accuracy {_fmt(fit.accuracy)}; "
            f"winning label unchanged on {fit.winners_unchanged}/{fit.rows} rows"
            + (f"; min candidate mass {s.min_candidate_mass:.4f}" if s.min_candidate_mass is not None else "")
            + (f" (accuracy with out-of-scope abstention {fit.fitted_mass_accuracy:.3f})" if fit.fitted_mass_accuracy is not None else "")
            + (f"; min probability {s.min_probability}" if s.min_probability is not None else ""),
        )
        if fit.warning:
            say(err, f"warning: {fit.warning}")
    say(out, f"saved {output}")


def _prior_line(fit: Any) -> str:
    favoured = ", ".join(f"{label} {p:.3f}" for label, p in fit.favoured())
    return (f"{fit.field}: domain prior from {fit.rows} unlabelled rows (most favoured: {favoured}; spread over "
            f"{fit.effective_labels:.1f} of {len(fit.prior)} labels); answer changed on {fit.answers_changed}/{fit.rows} rows, "
            f"labels predicted {fit.labels_predicted_raw} -> {fit.labels_predicted_debiased}"
            + ("; the earlier temperature was fitted under another correction and is reset to 1" if fit.temperature_reset else ""))


def _print_line(out: Console, line: str) -> None:
    out.print(line, markup=False, highlight=False, soft_wrap=True)


def _debias(name: str | None) -> str | None:
    from ..spec.rubric import Debias

    if name is None:
        return None
    try:
        return Debias(name).value
    except ValueError:
        raise DataError(f"--debias must be one of {', '.join(d.value for d in Debias)}, got {name!r}") from None


def _existing_calibration(path: Path, rubric: Any) -> Any:
    """The calibration already at `path`, whose other fields are kept; one for another rubric is replaced."""
    from ..runtime.readout.calibration import Calibration

    if not path.is_file():
        return None
    existing = Calibration.load(path)
    try:
        existing.check(rubric)
    except CalibrationError:
        return None
    return existing


def _read_fields(rubric: Any, fields: list[str]) -> list[str]:
    """The fields to calibrate, refusing a derived one: it is computed from others, never read, so a
    temperature or prior fitted for it would never be applied."""
    for name in fields:
        spec = rubric.fields[name]
        if spec.derive is not None:
            raise DataError(f"field {name!r} is derived from {', '.join(spec.derive.reads)}, not read from the model, "
                            "so there is nothing to calibrate; calibrate the fields it reads")
    return fields


def _rows(data: Path, rubric: Any, fields: list[str], text_column: str, columns: list[str] | None,
          rows: str | None, limit: int | None, seed: int, err: Console) -> list[LabelledRow]:
    """The selected labelled rows, gold labels read as the fields answer them (`True` -> `true`); a gold
    column that holds none of its field's answers is warned about on stderr before the model loads.
    A row with an empty label for a field (a `when` field where it is not asked, a row labelling only
    other fields) is left out of that field's figures, and stderr says how many and which; a row
    labelling none of the fields is left out altogether."""
    loaded, used = load_labelled(data, text_column=text_column, fields=fields, given_columns=columns, rubric=rubric)
    chosen = select_rows(loaded, rows_slice=parse_slice(rows), limit=limit, seed=seed)
    for name in fields:
        unlabelled = [row.index for row in chosen if not row.gold[name]]
        if len(unlabelled) == len(chosen):
            raise DataError(f"{data}: none of the {count(len(chosen), 'selected row')} has a label for {name!r} "
                            f"(column {used[name]!r})")
        if unlabelled:
            say(err, f"left out {count(len(unlabelled), 'row')} with no label for {name!r} in column {used[name]!r} "
                     f"(data rows {listing(unlabelled, str, 5)}); {len(chosen) - len(unlabelled)} left for it")
    chosen = [row for row in chosen if any(row.gold[name] for name in fields)]
    for line in gold_warnings(chosen, rubric, used):
        say(err, line)
    return chosen


def _fitting_rows(heads: Any, chosen: list[LabelledRow]) -> list[int] | None:
    """The positions of the `chosen` rows the heads were fitted on (None: no heads answer any field, or
    the heads file does not record its fitting rows)."""
    if heads is None or heads.fitted_on is None or not heads.fitted_fields:
        return None
    return heads.fitted_on_rows([row.text for row in chosen])


def _warn_failed_rows(err: Console, run: Any) -> None:
    """Rows the engine could not decide count as invalid in `valid_rate`: say which and why."""
    failed = [(row.index, reading.error) for row, reading in zip(run.rows, run.readings) if reading.error]
    if failed:
        shown_rows = "; ".join(f"data row {index}: {error}" for index, error in failed[:3])
        more = f"; and {len(failed) - 3} more" if len(failed) > 3 else ""
        say(err, f"warning: {count(len(failed), 'row')} could not be decided and count as invalid in valid_rate "
                 f"({shown_rows}{more})")


def _warn_fitting_rows(err: Console, overlap: list[int], chosen: list[LabelledRow], heads_file: Path | None,
                       doing: str) -> None:
    """A head is right on its own training rows far more often than on new ones: figures read there
    overstate it."""
    if overlap:
        say(err, f"warning: {len(overlap)} of the {count(len(chosen), 'row')} {doing} were used to fit the "
                 f"heads in {heads_file} (data rows {listing([chosen[i].index for i in overlap], str, 5)}): a head is right "
                 "on its own training rows far more often than on new ones; use rows held out from `fit`")


def _texts(path: Path, text_column: str, rows: str | None, limit: int | None, seed: int) -> list[str]:
    """The unlabelled inputs: the text column of a data file (any other columns are ignored), selected as --data is."""
    loaded, _ = load_labelled(path, text_column=text_column, columns={})
    return [row.text for row in select_rows(loaded, rows_slice=parse_slice(rows), limit=limit, seed=seed)]


def _engine(err: Console, model: str | None, threads: int | None, device: str, dtype: str, loader: str, *,
            generates: bool = False):
    """The engine; built on the transformers model when the command also generates (`--baseline`)."""
    return load_engine(err, model=model, threads=threads, device=device, dtype=dtype,
                       loader="transformers" if generates and loader == "auto" else loader)


def _selection(rows: str | None, limit: int | None, seed: int) -> str:
    # Said as the options were given: a --limit at or above the row count keeps every row.
    scope = f"data rows {rows}" if rows else "all data rows"
    return scope + (f", at most {limit} sampled with seed {seed}" if limit is not None else "")


def _print_summary(summary: dict[str, Any]) -> None:
    keys = ("n", "accuracy", "macro_f1", "valid_rate", "ece", "mean_candidate_mass")
    keys += ("mean_absolute_error",) if "mean_absolute_error" in summary else ()  # a score field
    compact = {k: summary.get(k) for k in keys}
    compact["debias"] = summary.get("debias")
    compact["readout"] = summary.get("readout")
    if "zero_shot" in summary:
        compact["zero_shot"] = {**{k: summary["zero_shot"].get(k) for k in keys},
                                "fitted_vs_zero_shot": summary["zero_shot"]["fitted_vs_zero_shot"]}
    if "raw" in summary:
        compact["raw"] = {k: summary["raw"].get(k) for k in keys}
    for extra in ("rows_heads_were_fitted_on", "n_out_of_scope", "abstention", "shuffle", "ablate"):
        if extra in summary:
            compact[extra] = summary[extra]
    if "baseline" in summary:
        compact["baseline"] = {k: summary["baseline"].get(k) for k in (*keys, "agreement_with_decisionflow", "mean_latency_ms")}
    if "tfidf" in summary:
        compact["tfidf"] = {k: summary["tfidf"].get(k) for k in ("n", "accuracy", "macro_f1", "train_rows", "terms",
                                                                   "readout_vs_baseline")}
    typer.echo(json.dumps(compact, indent=2))


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"
