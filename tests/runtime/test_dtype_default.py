"""What `dtype="auto"` means: bfloat16 on a CPU that multiplies it in hardware, float32 on any other CPU,
`$DECISIONFLOW_DTYPE` over both for every command; what was taken is in every result's stats."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from decisionflow.errors import ModelError
from decisionflow.runtime.model import loading
from decisionflow.runtime.model.loading import DTYPE_ENV, cpu_multiplies_bfloat16, resolve_dtype

CPU = torch.device("cpu")
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("native", [True, False])
def test_auto_follows_what_the_cpu_multiplies(monkeypatch, native):
    monkeypatch.delenv(DTYPE_ENV, raising=False)
    monkeypatch.setattr(loading, "cpu_multiplies_bfloat16", lambda: native)
    assert resolve_dtype("auto", CPU) is (torch.bfloat16 if native else torch.float32)
    assert resolve_dtype("float32", CPU) is torch.float32
    assert resolve_dtype("bf16", CPU) is torch.bfloat16


def test_native_bfloat16_is_read_from_the_cpu_flags(tmp_path):
    def cpu(flags: str) -> bool:
        info = tmp_path / f"cpuinfo-{abs(hash(flags))}"
        info.write_text(f"processor\t: 0\nmodel name\t: some cpu\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
        return cpu_multiplies_bfloat16(str(info))

    assert cpu("fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni")
    assert cpu("fpu avx512f amx_tile amx_bf16")
    assert not cpu("fpu sse2 avx2 avx512f avx512bw avx512_vnni")  # AVX-512 alone emulates bfloat16
    assert not cpu_multiplies_bfloat16(str(tmp_path / "no such file"))


def test_the_processor_is_named_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu\n")
    assert loading.cpu_model(str(info)) == "Intel(R) Xeon(R) Processor"
    assert loading.cpu_model(str(tmp_path / "no such file"))  # whatever platform knows, never empty


def test_the_environment_decides_what_auto_means(monkeypatch):
    monkeypatch.setenv(DTYPE_ENV, "bfloat16")
    assert resolve_dtype("auto", CPU) is torch.bfloat16
    assert resolve_dtype("float32", CPU) is torch.float32  # a format named outright wins
    monkeypatch.setenv(DTYPE_ENV, "float32")
    monkeypatch.setattr(loading, "cpu_multiplies_bfloat16", lambda: True)
    assert resolve_dtype("auto", CPU) is torch.float32
    monkeypatch.setenv(DTYPE_ENV, "half-ish")
    with pytest.raises(ModelError, match="DECISIONFLOW_DTYPE='half-ish' is not a number format"):
        resolve_dtype("auto", CPU)


def _run(text: str, env: dict[str, str], cwd: Path) -> dict:
    command = [sys.executable, "-m", "decisionflow.cli", "run", str(ROOT / "workflows" / "sentiment.yaml"),
               "--text", text, "--json"]
    run = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env, timeout=600)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.mark.model
def test_a_command_follows_the_environment_and_says_which_format_it_ran_in(engine, tmp_path):
    from decisionflow.spec.yaml_rubric import load_rubric

    text = "a gorgeous, witty film with a wonderful cast"
    plain = engine.decide(load_rubric(ROOT / "workflows" / "sentiment.yaml"), text)
    assert plain.stats.dtype == "float32"  # the suite's references (conftest)
    decided = _run(text, {**os.environ, DTYPE_ENV: "bfloat16"}, tmp_path)
    assert decided["stats"]["dtype"] == "bfloat16"
    assert decided["value"] == plain.to_dict()["value"]
    unset = {key: value for key, value in os.environ.items() if key != DTYPE_ENV}
    default = _run(text, unset, tmp_path)
    assert default["stats"]["dtype"] == ("bfloat16" if cpu_multiplies_bfloat16() else "float32")
    assert default["value"] == plain.to_dict()["value"]
