"""The engine with the Triton kernels (under TRITON_INTERPRET=1 on this CPU) decides as the torch path does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.model, pytest.mark.triton]

SCRIPT = textwrap.dedent("""
    import json
    from decisionflow.runtime.engine import Engine, EngineOptions
    from decisionflow.spec.rubric import Rubric

    rubric = Rubric.model_validate({
        "name": "kernels",
        "fields": {
            "topic": {"kind": "choice", "question": "Topic", "options": ["billing", "delivery", "card_payment", "card_payment_fee"]},
            "refund": {"kind": "boolean", "question": "Refund asked"},
        },
    })
    texts = ["Charged twice, refund me.", "Where is my parcel?"]
    torch_engine = Engine.load(kernels="torch", persist_prefixes=False)
    triton_engine = Engine(torch_engine.loaded, options=EngineOptions(kernels="triton"))
    out = {}
    for name, engine in (("torch", torch_engine), ("triton", triton_engine)):
        decisions = engine.decide_many(rubric, texts)
        out[name] = {"kernels": decisions[0].stats.kernels,
                     "fields": [{k: f.probabilities for k, f in d.fields.items()} for d in decisions],
                     "values": [{k: f.value for k, f in d.fields.items()} for d in decisions]}
    print(json.dumps(out))
""")


def test_triton_kernels_give_the_torch_paths_decisions():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=1200)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["torch"]["kernels"].startswith("torch") and result["triton"]["kernels"] == "triton"
    assert result["triton"]["values"] == result["torch"]["values"]
    for fused, plain in zip(result["triton"]["fields"], result["torch"]["fields"]):
        for name, probabilities in plain.items():
            for label, p in probabilities.items():
                assert fused[name][label] == pytest.approx(p, abs=2e-4), (name, label)
