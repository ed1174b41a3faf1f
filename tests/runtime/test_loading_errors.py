"""A model that cannot be loaded is one clear line naming what the user gave (no model is loaded here)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from decisionflow.cli import app
from decisionflow.errors import ModelError
from decisionflow.runtime.model.loading import load_model, load_tokenizer, model_source


@pytest.fixture
def places(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    Path("emptydir").mkdir()
    Path("fake.gguf").write_bytes(b"not a model at all" * 8)
    Path("ggufdir").mkdir()
    Path("ggufdir/model.gguf").write_bytes(b"GGUF")
    Path("weightsdir").mkdir()
    Path("weightsdir/model.safetensors").write_bytes(b"")
    Path("configdir").mkdir()
    Path("configdir/config.json").write_text("{}")
    Path("notokenizer").mkdir()
    Path("notokenizer/config.json").write_text("{}")
    Path("notokenizer/model.safetensors").write_bytes(b"")
    Path("rows.csv").write_text("text,label\nhi,positive\n")
    return tmp_path


@pytest.mark.parametrize("model, message", [
    ("emptydir/", ("could not load model 'emptydir': no model files (config.json, *.safetensors, *.gguf, "
                   "pytorch_model*.bin) in it")),
    ("fake.gguf", "could not load model 'fake.gguf': not a GGUF file (it does not start with the bytes GGUF)"),
    ("ggufdir", ("could not load model 'ggufdir': it holds no config.json but model.gguf; pass the file itself "
                 "(--model ggufdir/model.gguf)")),
    ("weightsdir", "could not load model 'weightsdir': no config.json in it"),
    ("configdir", ("could not load model 'configdir': it holds config.json but no weights and no tokenizer "
                   "(*.safetensors, pytorch_model*.bin)")),
    ("notokenizer", ("could not load model 'notokenizer': it holds config.json but no tokenizer (tokenizer.json, "
                     "tokenizer.model, vocab.json, tokenizer_config.json)")),
    ("rows.csv", ("could not load model 'rows.csv': a file that is not a model; give a model folder, a .gguf file "
                  "or a hub id (owner/name)")),
    ("./nowhere", "model not found: './nowhere' is neither a folder, a .gguf file nor a hub id (owner/name)"),
    ("nowhere/", "model not found: 'nowhere/' is neither a folder, a .gguf file nor a hub id (owner/name)"),
])
def test_a_path_that_holds_no_model_is_one_line(places, model, message):
    with pytest.raises(ModelError) as caught:
        model_source(model)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)
    with pytest.raises(ModelError, match=re.escape(message)):
        load_model(model, device="cpu")
    with pytest.raises(ModelError, match=re.escape(message)):
        load_tokenizer(model)


def test_a_hub_id_is_still_a_hub_id(places):
    assert model_source("someone/some-model") == ("hub", Path("someone/some-model"))


def _no_hub(monkeypatch, tmp_path: Path) -> list[str]:
    """An empty hub cache and a hub that cannot be reached; returns the ids the probe asked about."""
    from huggingface_hub import HfApi, constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    asked: list[str] = []

    def unreachable(self, repo_id, **kwargs):
        asked.append(repo_id)
        raise OSError("[Errno -2] Name or service not known")

    monkeypatch.setattr(HfApi, "model_info", unreachable)
    return asked


def test_an_unreachable_hub_is_asked_once_and_said_in_one_line(tmp_path, monkeypatch):
    asked = _no_hub(monkeypatch, tmp_path)
    started = time.perf_counter()
    with pytest.raises(ModelError) as caught:
        load_model("someone/nonexistent-model-xyz", device="cpu")
    assert time.perf_counter() - started < 30  # no backed-off retries
    assert asked == ["someone/nonexistent-model-xyz"]
    assert str(caught.value) == (
        "could not load model 'someone/nonexistent-model-xyz': it is not in the local hub cache, and the hub "
        "cannot be reached ([Errno -2] Name or service not known); connect this machine or pass a local "
        "folder or .gguf file"
    )
    asked.clear()
    with pytest.raises(ModelError, match="the hub cannot be reached"):
        load_tokenizer("someone/nonexistent-model-xyz")
    assert asked == ["someone/nonexistent-model-xyz"]


def test_the_cli_says_a_load_error_in_one_line(places, monkeypatch):
    _no_hub(monkeypatch, places)
    for model, words in [("emptydir/", "no model files"), ("fake.gguf", "'fake.gguf': not a GGUF file"),
                         ("someone/nonexistent-model-xyz", "the hub cannot be reached")]:
        result = CliRunner().invoke(app, ["run", "sentiment", "--model", model, "--text", "hi"])
        assert result.exit_code == 1
        [line] = result.stderr.splitlines()
        assert line.startswith("error: could not load model") and words in line, line
        planned = CliRunner().invoke(app, ["plan", "sentiment", "--tokens", "--model", model])
        assert planned.exit_code == 1
        [line] = planned.stderr.splitlines()
        assert line.startswith("error: could not load") and words in line, line


@pytest.mark.parametrize("kept_bytes", [1000, 5_000_000])
def test_a_gguf_file_cut_short_is_one_line_saying_so(tmp_path, kept_bytes):
    from decisionflow.runtime.model.loading import bundled_gguf

    cut = tmp_path / "cut.gguf"
    with bundled_gguf().open("rb") as whole:
        cut.write_bytes(whole.read(kept_bytes))
    for command in (["run", "sentiment", "--text", "hi"], ["check-model"]):
        result = CliRunner().invoke(app, [*command, "--model", str(cut)] if command[0] == "run" else [*command, str(cut)])
        assert result.exit_code == 1, result.output
        [line] = result.stderr.splitlines()
        assert line.startswith(f"error: could not load model {str(cut)!r}: the file ({kept_bytes:,} bytes) is cut "
                               "short or damaged, its GGUF data does not parse"), line


def test_a_converted_copy_changed_since_its_conversion_is_noticed(tmp_path):
    from decisionflow.runtime.model.loading import _changed_since_conversion, _record_converted_files

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 64)
    (tmp_path / "tokenizer.json").write_text("{}")
    assert _changed_since_conversion(tmp_path) == ""  # converted before the record was kept: trusted
    _record_converted_files(tmp_path)
    assert _changed_since_conversion(tmp_path) == ""
    os.truncate(tmp_path / "model.safetensors", 10)
    (tmp_path / "tokenizer.json").unlink()
    assert _changed_since_conversion(tmp_path) == ("model.safetensors changed since the conversion; "
                                                   "tokenizer.json is missing")


def test_a_cache_that_is_a_file_is_refused_before_any_conversion(tmp_path, monkeypatch):
    (tmp_path / "cache").write_text("not a folder")
    monkeypatch.setenv("DECISIONFLOW_CACHE", str(tmp_path / "cache" / "inner"))
    with pytest.raises(ModelError, match=r"DECISIONFLOW_CACHE '.*inner' cannot be used: .*cache is a file, not a folder"):
        load_model(None, device="cpu")
