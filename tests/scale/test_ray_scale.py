"""The Ray Data path on a local one-node cluster (2 CPUs) that only has loopback: same answers as the plain run.

Ray binds its node to the machine's outward interface even when told 127.0.0.1, so the cluster runs
inside a fresh network namespace (`unshare -n`) whose only interface is loopback; tests run as root.
One cluster serves both checks: `decisionflow run --engine ray --address ...` joins it from another
process (resuming an output that already holds some rows and a torn line, with a tuned adapter beside the
rubric that every actor merges), and `decide_dataset` maps a Dataset read from Parquet (no adapter).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from decisionflow.batch.resumable_jsonl import decide_file, rubric_fingerprint
from decisionflow.spec.yaml_rubric import load_rubric

pytestmark = [pytest.mark.model, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SENTIMENT = ROOT / "workflows" / "sentiment.yaml"
SENTENCES = [
    "a gorgeous, witty film", "dull and long", "the cast is wonderful", "a mess from start to end",
    "i laughed all the way through", "not worth the ticket", "a quiet, moving portrait", "the plot makes no sense",
]
# More rows than one actor batch (32), so some batches hold no failed row; row 2 is empty and fails.
TEXTS = ["" if i == 2 else f"{SENTENCES[i % len(SENTENCES)]} (take {i})" for i in range(40)]

CLUSTER_SCRIPT = """
import json, subprocess, sys
import ray
ray.init(num_cpus=2, include_dashboard=False)
address = ray.get_runtime_context().gcs_address
assert address.startswith("127.0.0.1:"), address
cli = subprocess.run(
    [sys.executable, "-m", "decisionflow.cli", "run", {tuned_rubric!r}, "--input", {csv!r}, "--output", {cli_out!r},
     "--id-column", "key", "--engine", "ray", "--address", address, "--num-actors", "1"],
    capture_output=True, text=True, cwd={root!r},
)
from decisionflow.scale import RayOptions, decide_dataset
rows = decide_dataset(ray.data.read_parquet({parquet!r}), {rubric!r}, RayOptions(num_actors=1, batch_size=5)).take_all()
with open({result!r}, "w") as handle:
    json.dump({{"returncode": cli.returncode, "stderr": cli.stderr, "rows": rows}}, handle)
ray.shutdown()
"""


def records(path: Path) -> dict[str, dict]:
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n"), "the output ends mid-line"
    lines = [json.loads(line) for line in text.splitlines()]
    ids = [line["id"] for line in lines]
    assert len(ids) == len(set(ids)), "an id appears twice"
    return {line["id"]: line for line in lines}


def same_decision(got: dict, expected: dict) -> None:
    assert ("error" in got) == ("error" in expected)
    if "error" in expected:
        assert got["error"] == expected["error"]
        return
    assert got["value"] == expected["value"]
    for name, field in expected["fields"].items():
        assert got["fields"][name]["probabilities"] == pytest.approx(field["probabilities"], abs=1e-5)


def random_adapter(engine, rubric):
    """An adapter that moves answers (random A and B on every layer's q and v projections), stamped for the
    bundled model and `rubric`: what the actors merge must be what the plain engine merges."""
    import torch

    from decisionflow.batch.resumable_jsonl import rubric_fingerprint
    from decisionflow.runtime.adapter import Adapter, AdapterMetadata

    generator = torch.Generator().manual_seed(0)
    weights = {}
    for name, module in engine.base_loaded.model.named_modules():
        if name.endswith(("self_attn.q_proj", "self_attn.v_proj")):
            out_features, in_features = module.weight.shape
            weights[name] = (torch.randn(4, in_features, generator=generator) * 0.05,
                             torch.randn(out_features, 4, generator=generator) * 0.05)
    assert weights, "the model has no q/v projections to adapt"
    metadata = AdapterMetadata(
        rubric=rubric.name, rubric_fingerprint=rubric_fingerprint(rubric), model=engine.model_fingerprint,
        weights=engine.weights_fingerprint, rank=4, alpha=8.0, targets=["q_proj", "v_proj"],
    )
    return Adapter(metadata, weights)


def loopback_namespace_available() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    return probe.returncode == 0


def test_ray_runs_give_the_plain_answers_with_every_id_once(engine, tmp_path):
    assert loopback_namespace_available(), (
        "this test needs `unshare -n` and `ip` (run as root) to keep the Ray cluster on loopback"
    )
    import pyarrow
    import pyarrow.parquet as pq

    ids = [f"row-{i}" for i in range(len(TEXTS))]
    csv_path = tmp_path / "in.csv"
    csv_path.write_text("text,key\n" + "".join(f'"{t}",{i}\n' for t, i in zip(TEXTS, ids)), encoding="utf-8")
    parquet_path = tmp_path / "in.parquet"
    pq.write_table(pyarrow.table({"id": ids, "text": TEXTS}), parquet_path)

    rubric = load_rubric(SENTIMENT)
    # The CLI reads a copy of the rubric with an adapter beside it; `decide_dataset` the shipped one, without.
    tuned_rubric = tmp_path / "sentiment.yaml"
    shutil.copy(SENTIMENT, tuned_rubric)
    adapter = random_adapter(engine, rubric)
    adapter.save(tmp_path / "sentiment.adapter.safetensors")
    plain_out, adapted_out = tmp_path / "plain.jsonl", tmp_path / "adapted.jsonl"
    decide_file(engine, rubric, csv_path, plain_out, id_column="key")
    decide_file(engine.with_adapter(adapter), rubric, csv_path, adapted_out, id_column="key")
    plain, adapted = records(plain_out), records(adapted_out)
    assert sorted(plain) == sorted(adapted) == sorted(ids)
    assert any(abs(adapted[i]["fields"]["sentiment"]["probabilities"]["positive"]
                   - plain[i]["fields"]["sentiment"]["probabilities"]["positive"]) > 1e-3 for i in ids if "error" not in plain[i])

    # The Ray run resumes an output holding four plain records (one an error, tried again) and a torn line.
    cli_out = tmp_path / "ray.jsonl"
    kept = [json.dumps(adapted[i]) + "\n" for i in ids[:4]]
    cli_out.write_text("".join(kept) + '{"id": "row-4", "val', encoding="utf-8")

    script = tmp_path / "cluster.py"
    result_path = tmp_path / "result.json"
    script.write_text(textwrap.dedent(CLUSTER_SCRIPT.format(
        rubric=str(SENTIMENT), tuned_rubric=str(tuned_rubric), csv=str(csv_path), cli_out=str(cli_out), parquet=str(parquet_path),
        result=str(result_path), root=str(ROOT),
    )), encoding="utf-8")
    run = subprocess.run(
        ["unshare", "-n", "bash", "-c", f"ip link set lo up && exec {sys.executable} {script}"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(result_path.read_text())

    assert result["returncode"] == 1, result["stderr"][-3000:]  # the empty row fails, as in the plain run
    summary = "36 decided, 3 already done, 1 failed of 40 rows -> " + str(cli_out) + "; 2 stale output lines dropped"
    assert summary in " ".join(result["stderr"].split()), result["stderr"][-3000:]
    assert "adapter: " + str(tmp_path / "sentiment.adapter.safetensors") in result["stderr"]
    on_ray = records(cli_out)
    assert sorted(on_ray) == sorted(ids)
    assert {(r["rubric"], r["rubric_fingerprint"]) for r in on_ray.values()} == {
        (r["rubric"], r["rubric_fingerprint"]) for r in plain.values()
    } == {(rubric.name, rubric_fingerprint(rubric))}
    for row_id in ids:
        same_decision(on_ray[row_id], adapted[row_id])

    rows = result["rows"]
    assert sorted(row["id"] for row in rows) == sorted(ids)
    for row in rows:
        decided = {"error": row["error"]} if row["error"] is not None else json.loads(row["result"])
        same_decision(decided, plain[row["id"]])
