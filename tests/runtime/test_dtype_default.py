"""What `dtype="auto"` means: float32 on the CPU, `$DECISIONFLOW_DTYPE` over it for every command; what
was taken is in every result's stats."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from decisionflow.errors import ModelError
from decisionflow.runtime.loading import DTYPE_ENV, resolve_dtype

CPU = torch.device("cpu")


def test_auto_is_float32_on_the_cpu(monkeypatch):
    monkeypatch.delenv(DTYPE_ENV, raising=False)
    assert resolve_dtype("auto", CPU) is torch.float32
    assert resolve_dtype("bf16", CPU) is torch.bfloat16


def test_the_environment_decides_what_auto_means(monkeypatch):
    monkeypatch.setenv(DTYPE_ENV, "bfloat16")
    assert resolve_dtype("auto", CPU) is torch.bfloat16
    assert resolve_dtype("float32", CPU) is torch.float32  # a format named outright wins
    monkeypatch.setenv(DTYPE_ENV, "half-ish")
    with pytest.raises(ModelError, match="DECISIONFLOW_DTYPE='half-ish' is not a number format"):
        resolve_dtype("auto", CPU)


@pytest.mark.model
def test_a_command_follows_the_environment_and_says_which_format_it_ran_in(engine, tmp_path):
    from decisionflow.spec.yaml_rubric import load_rubric

    root = Path(__file__).resolve().parents[2]
    text = "a gorgeous, witty film with a wonderful cast"
    command = [sys.executable, "-m", "decisionflow.cli", "run", str(root / "workflows" / "sentiment.yaml"),
               "--text", text, "--json"]
    run = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, DTYPE_ENV: "bfloat16"}, timeout=600)
    assert run.returncode == 0, run.stderr
    decided = json.loads(run.stdout)
    assert decided["stats"]["dtype"] == "bfloat16"
    plain = engine.decide(load_rubric(root / "workflows" / "sentiment.yaml"), text)
    assert plain.stats.dtype == "float32"
    assert decided["value"] == plain.to_dict()["value"]
