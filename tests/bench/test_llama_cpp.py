"""llama.cpp as a bench method: reported unavailable (with how to install it) where llama-cpp-python is
missing, as in CI; where it is installed, it answers a rubric from decisionflow's own prompt under the
rubric's JSON schema, and its bare prefill is measured apart."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
from suite_support import ROOT

from decisionflow.baselines.llama_cpp import LlamaCpp, gguf_file
from decisionflow.bench.presets import default_data_dir
from decisionflow.bench.runner import make_runners
from decisionflow.bench.workloads import build_workloads
from decisionflow.errors import Unavailable
from decisionflow.spec.yaml_rubric import load_rubric

SENTIMENT = ROOT / "workflows" / "sentiment.yaml"


def test_without_llama_cpp_python_the_method_is_unavailable_and_says_how_to_install_it(engine, monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import fails as where it is not installed
    with pytest.raises(Unavailable, match=r"pip install 'decisionflow\[llamacpp\]'"):
        LlamaCpp(engine)
    (runner,) = make_runners(engine, ["llama_cpp"])
    assert runner.name == "llama_cpp" and "llama-cpp-python is not installed" in runner.unavailable


def test_a_model_not_loaded_from_gguf_is_named(tmp_path):
    folder = SimpleNamespace(loaded=SimpleNamespace(name=str(tmp_path)))
    with pytest.raises(Unavailable, match="llama.cpp reads GGUF files"):
        gguf_file(folder)


def test_the_bundled_model_is_read_from_its_gguf_file(engine):
    path = gguf_file(engine)
    assert path.suffix == ".gguf" and path.is_file()


def test_llama_cpp_answers_a_rubric_from_the_same_prompt(engine):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is an optional extra (decisionflow[llamacpp])")
    llama = LlamaCpp(engine)
    rubric = load_rubric(SENTIMENT)
    result = llama(rubric, "a gorgeous, witty, seductive movie")
    assert result.valid, (result.reason, result.text)
    assert result.values["sentiment"] in ("positive", "negative")
    assert result.generated_tokens >= 3 and result.prompt_tokens > 50
    assert llama.prefill(rubric, "a gorgeous, witty, seductive movie") > 0
    # A multi-field preset: every key in order, every answer allowed, by the grammar.
    workload = next(w for w in build_workloads(default_data_dir(), quick=True) if w.fields > 1)
    many = llama(workload.rubric, workload.payload)
    assert many.valid, (many.reason, many.text)
    assert list(many.values) == list(workload.rubric.fields)
