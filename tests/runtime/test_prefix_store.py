"""Prefix caches persisted on disk: reused by a new engine, never served for a changed rubric, template or
model, and a damaged file costs a warning, not a request."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from decisionflow.runtime.engine import Engine, EngineOptions
from decisionflow.runtime.model.loading import LoadedModel, cache_root
from decisionflow.runtime.prefix_store import FOLDER, LEGACY_FOLDER, PrefixCacheWarning, legacy_folders, model_fingerprint
from decisionflow.spec.rubric import Catalog, Rubric

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]
RUBRIC = Rubric.model_validate({
    "name": "stored",
    "instructions": "Route one customer message.",
    "fields": {
        "topic": {"kind": "choice", "question": "What it is about", "options": ["delivery", "billing", "account"]},
        "urgent": {"kind": "boolean", "question": "Whether it is urgent"},
    },
})
TEXT = "I was billed twice this month, please fix it today."


def fresh(loaded: LoadedModel, folder: Path, **options) -> Engine:
    return Engine(loaded, options=EngineOptions(prefix_store=folder, **options))


def test_a_new_engine_reads_the_prefix_from_disk(engine, tmp_path):
    first = fresh(engine.loaded, tmp_path).decide(RUBRIC, TEXT)
    assert first.stats.prefix_source == "prefill" and "prefix_prefill" in first.stats.timings_ms
    assert len(list(tmp_path.glob("*.safetensors"))) == 1
    second = fresh(engine.loaded, tmp_path).decide(RUBRIC, TEXT)
    assert second.stats.prefix_source == "disk" and "prefix_load" in second.stats.timings_ms
    assert second.to_dict()["fields"] == first.to_dict()["fields"]
    third = fresh(engine.loaded, tmp_path)
    third.decide(RUBRIC, TEXT)
    assert third.decide(RUBRIC, TEXT).stats.prefix_source == "memory"


def test_a_changed_rubric_or_template_is_not_served_a_stale_prefix(engine, tmp_path):
    fresh(engine.loaded, tmp_path).decide(RUBRIC, TEXT)
    reworded = Rubric.model_validate({**RUBRIC.model_dump(), "instructions": "Route one customer e-mail."})
    assert fresh(engine.loaded, tmp_path).decide(reworded, TEXT).stats.prefix_source == "prefill"
    tokenizer = copy.deepcopy(engine.tokenizer)
    # ChatML with one visible difference: a blank line after each role.
    tokenizer.chat_template = (
        "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n\\n' + message['content'] }}"
        "{% if not loop.last or not continue_final_message %}{{ '<|im_end|>\\n' }}{% endif %}{% endfor %}"
    )
    templated = Engine(LoadedModel(engine.loaded.model, tokenizer, "changed template"),
                       options=EngineOptions(prefix_store=tmp_path))
    compiled, _ = templated.compile(RUBRIC)
    original, _ = engine.compile(RUBRIC)
    if compiled.prefix_tokens == original.prefix_tokens:
        pytest.fail("the template change did not change the prefix; the test needs a visible change")
    assert templated.decide(RUBRIC, TEXT).stats.prefix_source == "prefill"
    assert len(list(tmp_path.glob("*.safetensors"))) == 3
    assert len(list(tmp_path.glob("*.prior.json"))) == 3  # nor a prior read under another template


def test_a_changed_model_has_another_fingerprint(engine):
    model = engine.loaded.model
    altered = copy.deepcopy(model)
    with torch.no_grad():
        altered.model.norm.weight[0] += 0.01
    assert model_fingerprint(altered) != model_fingerprint(model)
    assert model_fingerprint(copy.deepcopy(model)) == model_fingerprint(model)


def test_a_damaged_file_is_ignored_with_a_warning(engine, tmp_path):
    first = fresh(engine.loaded, tmp_path).decide(RUBRIC, TEXT)
    (stored,) = tmp_path.glob("*.safetensors")
    stored.write_bytes(b"not a safetensors file")
    with pytest.warns(PrefixCacheWarning, match="ignoring the stored prefix"):
        again = fresh(engine.loaded, tmp_path).decide(RUBRIC, TEXT)
    assert again.stats.prefix_source == "prefill"
    assert again.to_dict()["fields"] == first.to_dict()["fields"]
    assert fresh(engine.loaded, tmp_path).decide(RUBRIC, TEXT).stats.prefix_source == "disk"  # rewritten


def test_a_file_whose_values_were_damaged_in_place_is_ignored_with_a_warning(engine, tmp_path):
    # Same size and a valid header: only the values are overwritten, as a bad disk or a stray write does.
    first = fresh(engine.loaded, tmp_path).decide(RUBRIC, TEXT, debias="none")
    (stored,) = tmp_path.glob("*.safetensors")
    data = bytearray(stored.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 4096] = b"\xff" * 4096  # 0xffffffff is a NaN in float32
    stored.write_bytes(bytes(data))
    with pytest.warns(PrefixCacheWarning, match="values that are not finite"):
        again = fresh(engine.loaded, tmp_path).decide(RUBRIC, TEXT, debias="none")
    assert again.stats.prefix_source == "prefill"
    assert again.to_dict()["fields"] == first.to_dict()["fields"]


def test_scores_that_are_not_finite_are_an_error_not_an_answer(engine, monkeypatch):
    from decisionflow.errors import ModelError
    from decisionflow.runtime import executor

    real = executor.read_fields

    def poisoned(*args, **kwargs):
        readings = real(*args, **kwargs)
        for reading in readings.values() if isinstance(readings, dict) else readings:
            object.__setattr__(reading, "probabilities", tuple(float("nan") for _ in reading.probabilities))
        return readings

    monkeypatch.setattr(executor, "read_fields", poisoned)
    with pytest.raises(ModelError, match="not finite numbers"):
        Engine(engine.loaded).decide(RUBRIC, TEXT, debias="none")


def test_the_store_keeps_within_its_byte_budget(engine, tmp_path):
    budget = fresh(engine.loaded, tmp_path, prefix_store_bytes=1)
    for i in range(3):
        budget.decide(Rubric.model_validate({**RUBRIC.model_dump(), "name": f"budget_{i}", "instructions": f"Case {i}."}), TEXT)
    assert len(list(tmp_path.glob("*.safetensors"))) == 1


def test_a_second_cold_cli_run_skips_the_prefix_prefill(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "models").symlink_to(cache_root() / "models", target_is_directory=True)
    env = {**os.environ, "DECISIONFLOW_CACHE": str(cache)}
    command = [sys.executable, "-m", "decisionflow.cli", "run", str(ROOT / "workflows" / "sentiment.yaml"),
               "--json", "--text", "a gorgeous, witty film"]
    runs = [subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr
    first, second = (json.loads(run.stdout) for run in runs)
    assert first["stats"]["prefix_source"] == "prefill"
    assert second["stats"]["prefix_source"] == "disk"
    assert second["fields"] == first["fields"]


def test_the_content_free_prior_is_stored_beside_the_prefix_and_reused(engine, tmp_path, monkeypatch):
    first = fresh(engine.loaded, tmp_path).decide(RUBRIC, TEXT)
    assert first.fields["topic"].debias == "content_free_half"  # the engine's default readout
    assert len(list(tmp_path.glob("*.prior.json"))) == 1
    second = fresh(engine.loaded, tmp_path)
    asked: list[list] = []
    original = second._decide
    monkeypatch.setattr(second, "_decide", lambda target, payloads, **kw: asked.append(payloads) or original(target, payloads, **kw))
    again = second.decide(RUBRIC, TEXT)
    assert asked == [[TEXT]]  # no content-free inputs decided: the prior came from disk
    assert again.to_dict()["fields"] == first.to_dict()["fields"]
    # Another catalog strategy reads other rows: its prior is its own.
    fresh(engine.loaded, tmp_path, catalog=Catalog.LABELS).decide(RUBRIC, TEXT)
    assert len(list(tmp_path.glob("*.prior.json"))) == 2


def test_a_damaged_prior_file_is_ignored_with_a_warning(engine, tmp_path):
    first = fresh(engine.loaded, tmp_path).decide(RUBRIC, TEXT)
    (stored,) = tmp_path.glob("*.prior.json")
    stored.write_text("{not json", encoding="utf-8")
    with pytest.warns(PrefixCacheWarning, match="ignoring the stored prior"):
        again = fresh(engine.loaded, tmp_path).decide(RUBRIC, TEXT)
    assert again.to_dict()["fields"] == first.to_dict()["fields"]
    assert json.loads(stored.read_text(encoding="utf-8"))["priors"]  # recomputed and rewritten


def test_eviction_skips_files_another_process_removed_meanwhile(tmp_path):
    """Workers sharing the folder evict at the same time: a file listed but gone before it is measured
    (here a link whose target was removed) is skipped, not a FileNotFoundError that fails a request."""
    from decisionflow.runtime.passes.backend import PrefixCache
    from decisionflow.runtime.prefix_store import PrefixStore

    (tmp_path / "gone.safetensors").symlink_to(tmp_path / "removed-by-another-worker")
    store = PrefixStore(tmp_path, fingerprint="test", dtype=torch.float32, max_bytes=1)
    prefix = PrefixCache(kv=[(torch.ones(1, 1, 3, 2), torch.ones(1, 1, 3, 2))], length=3)
    store.save([1, 2, 3], prefix)  # over budget: evicts, meeting the dangling entry
    assert store.path([1, 2, 3]).is_file()  # the one just written is kept
    assert store.load([1, 2, 3], layers=1, device=torch.device("cpu")) is not None
    store.path([1, 2, 3]).unlink()
    assert store.load([1, 2, 3], layers=1, device=torch.device("cpu")) is None


def test_a_store_written_under_the_earlier_folder_name_is_read_and_moved_over(engine, tmp_path):
    """The store's folder was `heads` before it was `prefixes` (same file names, same format): a new engine
    reads a prefix and a prior stored there instead of computing them again, and moves them into its folder."""
    old, new = tmp_path / LEGACY_FOLDER, tmp_path / FOLDER
    first = fresh(engine.loaded, old).decide(RUBRIC, TEXT)
    assert len(list(old.glob("*.safetensors"))) == len(list(old.glob("*.prior.json"))) == 1
    second = fresh(engine.loaded, new).decide(RUBRIC, TEXT)
    assert second.stats.prefix_source == "disk" and "prefix_load" in second.stats.timings_ms
    assert second.to_dict()["fields"] == first.to_dict()["fields"]
    assert len(list(new.glob("*.safetensors"))) == len(list(new.glob("*.prior.json"))) == 1
    assert not list(old.iterdir())


def test_a_damaged_file_in_the_earlier_folder_is_ignored_and_rebuilt(engine, tmp_path):
    old, new = tmp_path / LEGACY_FOLDER, tmp_path / FOLDER
    first = fresh(engine.loaded, old).decide(RUBRIC, TEXT)
    (stored,) = old.glob("*.safetensors")
    stored.write_bytes(b"not a safetensors file")
    with pytest.warns(PrefixCacheWarning, match="ignoring the stored prefix"):
        again = fresh(engine.loaded, new).decide(RUBRIC, TEXT)
    assert again.stats.prefix_source == "prefill"
    assert again.to_dict()["fields"] == first.to_dict()["fields"]
    assert len(list(new.glob("*.safetensors"))) == 1  # rebuilt where the store now lives


def test_only_a_folder_named_prefixes_reads_the_earlier_one():
    assert legacy_folders(Path("/cache") / FOLDER) == (Path("/cache") / LEGACY_FOLDER,)
    assert legacy_folders(Path("/elsewhere/store")) == ()


def test_the_earlier_names_still_work(engine, tmp_path):
    with pytest.warns(DeprecationWarning, match="prefix_store"):
        options = EngineOptions(head_store=tmp_path, head_store_bytes=1 << 20)
    assert options.prefix_store == options.head_store == tmp_path and options.prefix_store_bytes == 1 << 20
    stats = Engine(engine.loaded, options=options).decide(RUBRIC, TEXT).stats
    assert (stats.head_tokens, stats.head_cache_hit, stats.head_source) == (stats.prefix_tokens, stats.prefix_cache_hit, stats.prefix_source)
    written = stats.to_dict()
    assert written["head_source"] == written["prefix_source"] and written["head_tokens"] == written["prefix_tokens"]
