"""Every figure in docs/ has one runner and its raw results in benchmarks/<topic>/<figure>/, and scripts/ keeps
only what users run: a figure whose command or raw file is missing, moved or misspelt fails here, not in a
reader's shell. The folders sit in their topic (speed, quality, fitting, serving; dated snapshots in archive),
the runners write one results format (`benchmarks.common.write_results`: a `conditions` block) and read the
labelled sets through `decisionflow.quality.labelled`. Nothing here runs a benchmark."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
TOPICS = ("speed", "quality", "fitting", "serving", "archive")
SHARED = {"README.md", "__init__.py", "common.py", "paired_rows.py"}
"""What sits at benchmarks/ top beside the topic folders: the index and the helpers every topic shares."""
USER_TOOLS = {"setup.sh", "gpu_check.py", "prepare_gpu_wheels.py", "load_test_serve.py"}
RESULT_SUFFIXES = {".json", ".txt", ".log", ".time", ".png"}
FIGURES = sorted(path.parent for path in BENCHMARKS.glob("*/*/run.sh"))
MEASURERS = sorted(BENCHMARKS.glob("*/*/measure.py"))
SCRIPTS = sorted(BENCHMARKS.rglob("*.py"))
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md", BENCHMARKS / "README.md"]
CITING = DOCS + sorted((ROOT / "scripts").glob("*.py")) + [folder / "run.sh" for folder in FIGURES] + SCRIPTS
"""Where a benchmarks/ path or benchmarks. module is named: the docs, the user scripts, the runners and the
benchmark scripts themselves (their docstrings and imports)."""
DATED = re.compile(r"\d{4}_\d{2}_\d{2}")
IGNORED = {"__pycache__"}


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def test_scripts_keeps_only_the_tools_users_run():
    assert {path.name for path in (ROOT / "scripts").iterdir() if path.name not in IGNORED} == USER_TOOLS


def test_benchmarks_top_holds_the_topics_and_the_shared_helpers_only():
    entries = {path.name: path for path in BENCHMARKS.iterdir() if path.name not in IGNORED}
    folders = {name for name, path in entries.items() if path.is_dir()}
    assert folders == set(TOPICS), f"a folder outside the topic folders: {sorted(folders - set(TOPICS))}"
    assert set(entries) - folders == SHARED


@pytest.mark.parametrize("topic", TOPICS)
def test_a_topic_holds_figure_folders_each_with_a_runner(topic: str):
    folders = {path for path in (BENCHMARKS / topic).iterdir() if path.is_dir() and path.name not in IGNORED}
    assert folders, f"{topic}/ is empty"
    assert folders <= set(FIGURES), f"a {topic}/ folder without run.sh: {sorted(p.name for p in folders - set(FIGURES))}"
    files = {path.name for path in (BENCHMARKS / topic).iterdir() if path.is_file()}
    assert files <= {"__init__.py"}, f"{topic}/ holds files of its own: {sorted(files)}"


def test_dated_snapshots_sit_in_the_archive():
    dated = [folder for folder in FIGURES if DATED.search(folder.name)]
    assert dated and all(folder.parent.name == "archive" for folder in dated)


def test_the_modules_run_with_dash_m_are_packages():
    """`python -m benchmarks.<topic>.<figure>.measure` needs an `__init__.py` in the topic and the figure folder."""
    missing = [path.relative_to(ROOT) for measurer in MEASURERS
               for path in (BENCHMARKS / "__init__.py", measurer.parent.parent / "__init__.py", measurer.parent / "__init__.py")
               if not path.is_file()]
    assert not missing


@pytest.mark.parametrize("folder", FIGURES, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_a_runner_parses_starts_from_the_root_and_has_results(folder: Path):
    runner = folder / "run.sh"
    assert subprocess.run(["bash", "-n", str(runner)], capture_output=True).returncode == 0
    text = runner.read_text(encoding="utf-8")
    assert 'cd "$(dirname "$0")/../../.."' in text, "runs from anywhere: it moves to the repository root first"
    assert "docs/bench/" not in text and "scripts/measure" not in text, "names a path that no longer exists"
    results = [path for path in folder.rglob("*") if path.suffix in RESULT_SUFFIXES]
    assert results, f"{folder.name}: no raw results beside its runner"


@pytest.mark.parametrize("folder", FIGURES, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_every_figure_is_indexed(folder: Path):
    index = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    assert f"`{folder.parent.name}/{folder.name}/`" in index


def test_every_folder_the_index_names_exists():
    index = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`((?:%s)/\w+)/`" % "|".join(TOPICS), index))
    assert named and not [name for name in sorted(named) if not (BENCHMARKS / name / "run.sh").is_file()]


def test_every_benchmarks_path_cited_exists():
    named = set()
    for doc in CITING:
        for match in re.finditer(r"benchmarks/[\w./{},-]+", doc.read_text(encoding="utf-8")):
            path = match.group(0).rstrip(".,)")
            for expanded in expand_braces(path):
                named.add((str(doc.relative_to(ROOT)), expanded))
    missing = [(doc, path) for doc, path in sorted(named) if not (ROOT / path).exists()]
    assert not missing
    assert len(named) > 30


def test_every_module_command_cited_is_a_module():
    modules = {module_name(path) for path in SCRIPTS}
    commands = {(str(doc.relative_to(ROOT)), match.group(1).rstrip("."))
                for doc in CITING for match in re.finditer(r"-m (benchmarks[\w.]+)", doc.read_text(encoding="utf-8"))}
    assert commands
    assert not [(doc, name) for doc, name in sorted(commands) if name not in modules]


def test_every_benchmarks_module_cited_exists():
    """`benchmarks.x.y` in a doc, an import or a docstring: a module, or a name defined at a module's top."""
    modules = {module_name(path): path for path in SCRIPTS}
    unknown = []
    for doc in CITING:
        for match in re.finditer(r"(?<![\w/.-])benchmarks\.(?!md\b)[\w.]*\w", doc.read_text(encoding="utf-8")):
            name = match.group(0)
            if name in modules:
                continue
            owner, _, attribute = name.rpartition(".")
            source = modules.get(owner)
            defined = source is not None and source.name != "__init__.py" and re.search(
                rf"^(def|class) {attribute}\b|^{attribute}\b.*=", source.read_text(encoding="utf-8"), re.MULTILINE)
            if not defined:
                unknown.append((str(doc.relative_to(ROOT)), name))
    assert not sorted(set(unknown))


def test_every_measurer_writes_through_the_common_writer():
    """One results format: a measurer writes with `write_results` (the `conditions` block), not its own JSON."""
    for measurer in MEASURERS:
        text = measurer.read_text(encoding="utf-8")
        assert "write_results(" in text, f"{measurer.relative_to(ROOT)} writes its results without write_results"
        assert "machine()" not in text and '"machine":' not in text, f"{measurer.relative_to(ROOT)}: a block of its own"
        assert not re.search(r"\.out\.write_text\(json\.dumps", text), f"{measurer.relative_to(ROOT)} writes --out itself"


@pytest.mark.parametrize("folder", FIGURES, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_a_runner_that_writes_json_from_a_command_stamps_it(folder: Path):
    """JSON a runner takes from another program's output (`decisionflow fit --json > FILE`) gets the conditions."""
    if folder.parent.name == "archive":
        pytest.skip("kept as a record")
    text = (folder / "run.sh").read_text(encoding="utf-8")
    if re.search(r">\s*\$\w+/[\w$.-]*\.json", text):
        assert "benchmarks.common stamp" in text or "benchmarks.common merge" in text


def test_benchmark_scripts_read_labelled_rows_through_quality_labelled():
    readers = re.compile(r"\bcsv\.|DictReader|read_csv|pandas|\bpd\.")
    found = [str(path.relative_to(ROOT)) for path in SCRIPTS if readers.search(path.read_text(encoding="utf-8"))]
    assert not found, f"labelled files read past decisionflow.quality.labelled: {found}"


def test_write_results_puts_the_conditions_first(tmp_path: Path):
    code = ("import sys; from pathlib import Path; from benchmarks.common import write_results\n"
            "write_results(Path(sys.argv[1]), {'figure': 1.5, 'machine': {'old': True}}, conditions={'dtype': 'float32'})\n")
    out = tmp_path / "results.json"
    done = subprocess.run([sys.executable, "-c", code, str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    written = json.loads(out.read_text(encoding="utf-8"))
    assert list(written) == ["conditions", "figure"] and written["figure"] == 1.5
    conditions = written["conditions"]
    assert {"cpu", "cpu_count", "torch", "transformers", "dtype", "date", "command"} <= set(conditions)
    assert conditions["dtype"] == "float32" and "write_results" in conditions["command"]


def test_every_measurer_answers_help():
    """Imports resolve from their new place (the shared helpers, the repository root)."""
    code = "import runpy, sys\nfor name in sys.argv[1:]:\n    sys.argv = [name, '--help']\n    try:\n        runpy.run_module(name, run_name='__main__')\n    except SystemExit as done:\n        assert done.code in (0, None), (name, done.code)\n"
    names = [module_name(path) for path in MEASURERS] + ["benchmarks.paired_rows"]
    done = subprocess.run([sys.executable, "-c", code, *names], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("usage:") == len(names)


def expand_braces(path: str) -> list[str]:
    match = re.search(r"\{([^}]*)\}", path)
    if not match:
        return [path]
    return [expanded for option in match.group(1).split(",")
            for expanded in expand_braces(path[:match.start()] + option + path[match.end():])]
