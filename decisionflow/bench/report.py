"""`decisionflow bench`'s report: a rich table, a Markdown table and PNG plots of the results."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from .workloads import SWEEP_PRESET


def _fmt(value: Any, spec: str = ".0f") -> str:
    if value is None:
        return "-"
    return format(value, spec)


def print_table(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="decisionflow bench (warm medians)", show_lines=False)
    for column, justify in (
        ("workload", "left"), ("fields", "right"), ("method", "left"), ("median ms", "right"), ("p90 ms", "right"),
        ("passes", "right"), ("prompt tok", "right"), ("gen tok", "right"), ("peak MiB", "right"),
        ("valid", "right"), ("agree json", "right"), ("agree grammar", "right"), ("x floor", "right"),
        ("x decisionflow", "right"), ("own floor ms", "right"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    previous = None
    for row in rows:
        if previous is not None and row["workload"] != previous:
            table.add_section()
        previous = row["workload"]
        if not row.get("available", True):
            table.add_row(row["workload"], str(row["fields"]), row["method"], f"unavailable: {row['reason'][:60]}")
            continue
        agree = row["agreement"]
        table.add_row(
            row["workload"], str(row["fields"]), row["method"], _fmt(row["median_ms"]), _fmt(row["p90_ms"]),
            _fmt(row["forward_passes"]), _fmt(row["prompt_tokens"]), _fmt(row["generated_tokens"]),
            _fmt(row["peak_rss_mb"]), _fmt(row["valid_rate"], ".0%"), _fmt(agree["json_generate"], ".2f"),
            _fmt(agree["grammar_constrained"], ".2f"), _fmt(row["floor_ratio"], ".2f"), _fmt(row["vs_decisionflow"], ".1f"),
            _fmt(row.get("own_floor_ms")),
        )
    # A pipe gets a wide console: the table has many columns and is meant to be read in a log.
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The results as a Markdown table (for docs/benchmarks.md)."""
    header = (
        "| workload | fields | method | median ms | p90 ms | passes | prompt tok | gen tok | peak MiB | valid "
        "| agree json | agree grammar | agree decisionflow | x floor | x decisionflow | own floor ms |"
    )
    lines = [header, "|" + " --- |" * (header.count("|") - 1)]
    for row in rows:
        if not row.get("available", True):
            lines.append(f"| {row['workload']} | {row['fields']} | {row['method']} | {row['reason'][:90]} |" + " |" * 12)
            continue
        agree = row["agreement"]
        lines.append("| " + " | ".join([
            row["workload"], str(row["fields"]), row["method"], _fmt(row["median_ms"]), _fmt(row["p90_ms"]),
            _fmt(row["forward_passes"]), _fmt(row["prompt_tokens"]), _fmt(row["generated_tokens"]),
            _fmt(row["peak_rss_mb"]), _fmt(row["valid_rate"], ".0%"), _fmt(agree["json_generate"], ".2f"),
            _fmt(agree["grammar_constrained"], ".2f"), _fmt(agree["decisionflow"], ".2f"),
            _fmt(row["floor_ratio"], ".2f"), _fmt(row["vs_decisionflow"], ".1f"), _fmt(row.get("own_floor_ms")),
        ]) + " |")
    return "\n".join(lines) + "\n"


def write_plots(rows: list[dict[str, Any]], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[Path] = []
    measured = [r for r in rows if r.get("available", True)]
    workloads = list(dict.fromkeys(r["workload"] for r in measured))
    methods = list(dict.fromkeys(r["method"] for r in measured))
    figure, axis = plt.subplots(figsize=(max(8, 1.4 * len(workloads)), 5))
    width = 0.8 / max(len(methods), 1)
    for m, method in enumerate(methods):
        heights = [next((r["median_ms"] for r in measured if r["workload"] == w and r["method"] == method), 0) for w in workloads]
        axis.bar([i + m * width for i in range(len(workloads))], heights, width, label=method)
    axis.set_yscale("log")
    axis.set_ylabel("warm median latency (ms, log scale)")
    axis.set_xticks([i + 0.4 - width / 2 for i in range(len(workloads))])
    axis.set_xticklabels(workloads, rotation=30, ha="right", fontsize=8)
    axis.legend(fontsize=7, ncol=2)
    axis.set_title("Latency by method per workload")
    figure.tight_layout()
    path = out / "latency_by_method.png"
    figure.savefig(path, dpi=120)
    plt.close(figure)
    written.append(path)

    sweep = [r for r in measured if r["group"] == "sweep" or r["workload"] == SWEEP_PRESET]
    if len({r["fields"] for r in sweep}) > 1:
        figure, axis = plt.subplots(figsize=(7, 5))
        for method in methods:
            points = sorted((r["fields"], r["median_ms"]) for r in sweep if r["method"] == method)
            if points:
                axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=method)
        floor = sorted({(r["fields"], r["floor_ms"]) for r in sweep})
        axis.plot([p[0] for p in floor], [p[1] for p in floor], linestyle="--", color="black", label="floor (1 pass over input)")
        axis.set_yscale("log")
        axis.set_xlabel(f"fields (first N of {SWEEP_PRESET})")
        axis.set_ylabel("warm median latency (ms, log scale)")
        axis.set_title("Latency vs field count")
        axis.legend(fontsize=7)
        figure.tight_layout()
        path = out / "latency_vs_fields.png"
        figure.savefig(path, dpi=120)
        plt.close(figure)
        written.append(path)
    return written
