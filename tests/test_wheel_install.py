"""A normal (non-editable) wheel install works away from the source tree: shipped workflows, bench
workloads and kernels all come from the installed package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.model, pytest.mark.slow]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv holding the built wheel; its dependencies are borrowed from this environment."""
    work = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work / "dist"), str(ROOT)],
        check=True, capture_output=True, text=True,
    )
    wheel = next((work / "dist").glob("decisionflow-*.whl"))
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # Dependencies (torch, transformers, ...) from this environment, after the venv's own packages.
    Path(site, "borrowed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True,
                   capture_output=True, text=True)
    return venv


def run(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ""}
    return subprocess.run([str(venv / "bin" / "decisionflow"), *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=600)


def test_the_wheel_holds_the_package_not_the_source_tree(installed: Path, tmp_path: Path):
    code = ("import decisionflow, decisionflow_kernels.reference as k, decisionflow.spec.references as r;"
            "print(decisionflow.__file__); print(k.__file__); print(r.shipped_workflows())")
    out = subprocess.run([str(installed / "bin" / "python"), "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, check=True).stdout.split()
    assert all("site-packages" in line and str(ROOT) not in line for line in out)
    assert Path(out[2], "support_triage.yaml").is_file()


def test_run_a_shipped_workflow_from_the_wheel(installed: Path, tmp_path: Path):
    checked = run(installed, "validate", "workflows/support_triage.yaml", "sentiment", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    decided = run(installed, "run", "workflows/sentiment.yaml", "--json", "--text", "a gorgeous, witty film", cwd=tmp_path)
    assert decided.returncode == 0, decided.stderr
    assert json.loads(decided.stdout)["value"]["sentiment"] in ("positive", "negative")
    # The heads shipped beside a workflow come with the wheel and are applied from it.
    banked = run(installed, "run", "workflows/banking77_intent.yaml", "--json", "--text", "my new card has not arrived yet",
                 cwd=tmp_path)
    assert banked.returncode == 0, banked.stderr
    assert json.loads(banked.stdout)["fields"]["intent"]["method"] != "zero_shot"


def test_bench_quick_from_the_wheel(installed: Path, tmp_path: Path):
    result = run(installed, "bench", "--quick", "--methods", "decisionflow,json_generate", "--repeats", "1",
                 "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = json.loads((tmp_path / "out" / "bench.json").read_text())["results"]
    assert {r["workload"] for r in rows} == {"model_routing_route", "support_triage_first_4"}
    assert all(r["available"] for r in rows)
