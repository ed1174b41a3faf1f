"""Rich renderings of results; the only core module that imports rich.

`Decision.__rich__` calls in here lazily, so this module reads decisions without importing their
module (the dependency runs one way).
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..spec.rubric import label_of

LOW_MASS = 0.2


def decision_table(decision: Any) -> Group:
    # Every user-written string goes in as Text: a label such as `[b]` or `:x:` is shown as written,
    # not read as rich markup or an emoji code.
    table = Table(title=Text(f"{decision.rubric}"), title_justify="left", show_lines=False)
    # Names and answers stay whole; the runner-up column wraps when the terminal is narrow.
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("answer", no_wrap=True)
    table.add_column("p", justify="right")
    table.add_column("mass", justify="right")
    table.add_column("runner-up", ratio=1)
    table.add_column("round", justify="right")
    for name, field in decision.fields.items():
        if not field.asked:
            table.add_row(Text(name), Text("—", style="dim"), "", "", Text(field.reason, style="dim"), str(field.round))
            continue
        ranked = sorted(field.probabilities.items(), key=lambda item: -item[1])
        # A derived field's answer is its rule applied to the decided answers, which need not be the
        # most probable value of its distribution: show the answer's own probability and the best other.
        shown = ranked[0][0] if field.abstained or field.value is None else label_of(field.value)
        p_shown = field.probabilities.get(shown, ranked[0][1])
        others = [(label, p) for label, p in ranked if label != shown]
        answer = "abstained" if field.abstained else _label(field.value)
        if field.expected_value is not None:
            answer += f" (mean {field.expected_value:.1f})"
        if field.fitted:
            answer += " (fitted head)"
        runner = f"{others[0][0]} {others[0][1]:.2f}" if others else ""
        if field.candidate_mass is None:
            mass = Text(field.method, style="dim")  # a derived field: computed, not read
        else:
            mass = Text(f"{field.candidate_mass:.2f}", style="red" if field.candidate_mass < LOW_MASS else "")
        table.add_row(Text(name), Text(answer), f"{p_shown:.2f}", mass, Text(runner), str(field.round))
    s = decision.stats
    corrections = sorted({f.debias for f in decision.fields.values()
                          if f.asked and f.method != "derived" and not f.fitted and f.debias != "none"})
    fitted = [name for name, f in decision.fields.items() if f.fitted]
    footer = Text(
        f"{s.forward_passes} forward pass{'' if s.forward_passes == 1 else 'es'}, {s.tokens_prefilled} tokens prefilled "
        f"(input {s.input_tokens}; prefix {s.prefix_tokens} tokens, from {s.prefix_source}), "
        f"{s.timings_ms.get('total', 0):.0f} ms"
        + (f"; p debiased ({', '.join(corrections)})" if corrections else "")
        + (f"; p of {', '.join(fitted)} from fitted heads" if fitted else "")
        + (f"; passes through the model's own forward ({s.path})" if s.path and s.path != "decoder" else ""),
        style="dim",
    )
    return Group(table, footer)


def _label(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
