"""Declaring, validating and planning never import torch, transformers or rich's heavy parts."""

from __future__ import annotations

import subprocess
import sys


def _modules_after(statement: str) -> set[str]:
    code = f"{statement}\nimport sys\nprint(' '.join(sorted(m.split('.')[0] for m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_the_core_is_light():
    loaded = _modules_after("import decisionflow; from decisionflow import plan, rubric_yaml, declare, references")
    assert not {"torch", "transformers", "rich"} & loaded


def test_the_cli_starts_without_the_engine():
    loaded = _modules_after("import decisionflow.cli")
    assert not {"torch", "transformers"} & loaded
