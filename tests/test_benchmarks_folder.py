"""Every figure in docs/ has one runner and its raw results in benchmarks/, and scripts/ keeps only what
users run: a figure whose command or raw file is missing, moved or misspelt fails here, not in a reader's
shell."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
USER_TOOLS = {"setup.sh", "gpu_check.py", "prepare_gpu_wheels.py", "load_test_serve.py"}
RESULT_SUFFIXES = {".json", ".txt", ".log", ".time", ".png"}
FIGURES = sorted(path.parent for path in BENCHMARKS.glob("*/run.sh"))
MEASURERS = sorted(BENCHMARKS.glob("*/measure.py"))
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md", BENCHMARKS / "README.md"]


def test_scripts_keeps_only_the_tools_users_run():
    assert {path.name for path in (ROOT / "scripts").iterdir() if path.name != "__pycache__"} == USER_TOOLS


def test_every_benchmark_folder_has_a_runner():
    folders = {path for path in BENCHMARKS.iterdir() if path.is_dir() and path.name != "__pycache__"}
    assert folders == set(FIGURES), "a benchmarks/ folder without run.sh"


@pytest.mark.parametrize("folder", FIGURES, ids=lambda path: path.name)
def test_a_runner_parses_starts_from_the_root_and_has_results(folder: Path):
    runner = folder / "run.sh"
    assert subprocess.run(["bash", "-n", str(runner)], capture_output=True).returncode == 0
    text = runner.read_text(encoding="utf-8")
    assert 'cd "$(dirname "$0")/../.."' in text, "runs from anywhere: it moves to the repository root first"
    assert "docs/bench/" not in text and "scripts/measure" not in text, "names a path that no longer exists"
    results = [path for path in folder.rglob("*") if path.suffix in RESULT_SUFFIXES]
    assert results, f"{folder.name}: no raw results beside its runner"


@pytest.mark.parametrize("folder", FIGURES, ids=lambda path: path.name)
def test_every_figure_is_indexed(folder: Path):
    index = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    assert f"`{folder.name}/`" in index


def test_every_benchmarks_path_the_docs_name_exists():
    named = set()
    for doc in DOCS:
        for match in re.finditer(r"benchmarks/[\w./{},-]+", doc.read_text(encoding="utf-8")):
            path = match.group(0).rstrip(".,)")
            for expanded in expand_braces(path):
                named.add((doc.name, expanded))
    missing = [(doc, path) for doc, path in sorted(named) if not (ROOT / path).exists()]
    assert not missing
    assert len(named) > 30


def test_every_module_command_the_docs_name_is_a_measurer():
    modules = {f"benchmarks.{path.parent.name}.measure" for path in MEASURERS} | {"benchmarks.paired_rows", "benchmarks.common"}
    named = {match.group(1) for doc in DOCS for match in re.finditer(r"-m (benchmarks[\w.]+)", doc.read_text(encoding="utf-8"))}
    assert named and named <= modules


def test_every_measurer_answers_help():
    """Imports resolve from their new place (the shared helpers, the repository root)."""
    code = "import runpy, sys\nfor name in sys.argv[1:]:\n    sys.argv = [name, '--help']\n    try:\n        runpy.run_module(name, run_name='__main__')\n    except SystemExit as done:\n        assert done.code in (0, None), (name, done.code)\n"
    names = [f"benchmarks.{path.parent.name}.measure" for path in MEASURERS] + ["benchmarks.paired_rows"]
    done = subprocess.run([sys.executable, "-c", code, *names], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("usage:") == len(names)


def expand_braces(path: str) -> list[str]:
    match = re.search(r"\{([^}]*)\}", path)
    if not match:
        return [path]
    return [expanded for option in match.group(1).split(",")
            for expanded in expand_braces(path[:match.start()] + option + path[match.end():])]
