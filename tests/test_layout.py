"""The package's layout holds: each step imports only the steps before it, and no import cycle exists.

spec → compiler → runtime → (fitting | batch | baselines) → (quality | bench | scale | integrations) → cli, and serve above
quality (its eval and coherence routes use quality's scores and variants); `errors`,
`paths` and `records` are below everything; `stats` (paired tests, temperature fitting and scaling, calibration metrics) imports only
`errors`, below `runtime`, `fitting`, `quality`, `bench` and `cli`, which share it;
nothing imports `cli`; the kernels import only torch and triton. Inside `runtime`, the rooms (`model`,
`passes`, `readout`, `heads`) sit below the modules on top (engine, prepared, executor) that put them
together. Imports are read from the source (ast), lazy ones inside functions included, so a shortcut taken
in a function body is caught too.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "decisionflow"
KERNELS = ROOT / "kernels"

BASE = {"errors", "paths", "records"}
"""Below every step: errors, path helpers and the strict record readers, which import only `errors`."""
ENGINE = {*BASE, "spec", "compiler", "runtime", "kernels"}
ALLOWED = {
    "errors": set(),
    "paths": set(),
    "records": {"errors"},
    "stats": {"errors"},  # the statistics `fitting` and `quality` share (neither may import the other)
    "spec": set(BASE),
    "compiler": {*BASE, "spec"},
    "runtime": {*BASE, "spec", "compiler", "kernels", "stats"},  # stats: the temperature scaling the readout applies
    "fitting": {*ENGINE, "stats"},
    "batch": ENGINE,
    "baselines": ENGINE,
    "quality": {*ENGINE, "baselines", "fitting", "stats"},
    "bench": {*ENGINE, "baselines", "stats"},
    "serve": {*ENGINE, "stats", "fitting", "quality"},  # the playground's eval and coherence routes score with quality's code
    "scale": {*ENGINE, "batch"},
    "integrations": ENGINE,  # the engine behind other frameworks' interfaces (LangChain's decision models)
    "cli": {*ENGINE, "stats", "fitting", "batch", "baselines", "quality", "bench", "serve", "scale"},
    "": {"errors", "spec", "compiler", "runtime", "fitting"},  # decisionflow/__init__.py: the public names, those needing torch or a tokenizer lazily
}
STEPS = [step for step in ALLOWED if step not in {"", *BASE}]
RUNTIME = PACKAGE / "runtime"
ROOMS = {
    "passes": {"passes"},
    "readout": {"readout", "result"},
    "heads": {"heads"},
    "model": {"model", "passes", "prefix_store"},
}
"""What each room of `runtime` may import from `runtime` itself. The passes know no fields, the readout no
hidden states, the fitted heads no pass; loading reaches the decoder it builds and the prefix store's
warning. None imports the engine, the prepared-rubric cache or the executor, which import them."""
ROOM_EXCEPTIONS = {"decisionflow.runtime.model.model_check": {"engine", "readout"}}
"""`check-model` runs an engine over the model it checks (through the plain-forward reference): it uses the
engine as the CLI does, and nothing in the runtime imports it."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Absolute names of every module `path` imports, relative imports resolved."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def step_of(module: str) -> str | None:
    """The pipeline step of a decisionflow module (`spec`, `runtime`, ...; "" for the package itself)."""
    if module == "decisionflow_kernels" or module.startswith("decisionflow_kernels."):
        return "kernels"
    if module == "decisionflow":
        return ""
    if not module.startswith("decisionflow."):
        return None
    return module.split(".")[1]


def package_modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_step_imports_only_the_steps_before_it():
    wrong = []
    for path in package_modules():
        own = step_of(module_name(path))
        for module in imported_modules(path):
            step = step_of(module)
            if step is None or step == own or (own == "" and module.count(".") == 0):
                continue
            if step not in ALLOWED[own]:
                wrong.append(f"{path.relative_to(ROOT)} imports {module} ({own or 'decisionflow'} -> {step})")
    assert not wrong, "\n".join(wrong)


def test_the_layout_has_the_pipeline_folders():
    steps = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert set(STEPS) == steps, f"folders without import rules: {steps - set(STEPS)}; rules without a folder: {set(STEPS) - steps}"
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert modules <= BASE, f"a module outside every step: {modules - BASE}"


def test_each_step_says_what_it_holds_and_the_readme_lists_it():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for step in STEPS:
        docstring = ast.get_docstring(ast.parse((PACKAGE / step / "__init__.py").read_text(encoding="utf-8")))
        assert docstring and len(docstring.splitlines()[0]) > 20, f"decisionflow/{step}/__init__.py has no first line saying what it holds"
        assert f"decisionflow/{step}/ " in readme, f"README's layout block does not list decisionflow/{step}/"



def test_the_runtime_rooms_sit_below_the_engine():
    wrong = []
    for path in sorted(RUNTIME.glob("*/*.py")):
        allowed = ROOMS[path.parent.name] | ROOM_EXCEPTIONS.get(module_name(path), set())
        for module in imported_modules(path):
            parts = module.split(".")
            if parts[:2] == ["decisionflow", "runtime"] and len(parts) > 2 and parts[2] not in allowed:
                wrong.append(f"{path.relative_to(ROOT)} imports {module} (runtime.{path.parent.name} -> runtime.{parts[2]})")
    assert not wrong, "\n".join(wrong)
    assert set(ROOM_EXCEPTIONS) <= {module_name(p) for p in RUNTIME.glob("*/*.py")}, "an exception for a module that is gone"


def test_each_runtime_room_has_a_rule_and_says_what_it_holds():
    rooms = {p.parent.name for p in RUNTIME.glob("*/__init__.py")}
    assert rooms == set(ROOMS), f"rooms without import rules: {rooms - set(ROOMS)}; rules without a room: {set(ROOMS) - rooms}"
    for room in rooms:
        docstring = ast.get_docstring(ast.parse((RUNTIME / room / "__init__.py").read_text(encoding="utf-8")))
        assert docstring and len(docstring.splitlines()[0]) > 20, f"decisionflow/runtime/{room}/__init__.py has no first line saying what it holds"


def test_the_kernels_import_only_torch_and_triton():
    stdlib = set(sys.stdlib_module_names)
    for path in sorted(KERNELS.glob("*.py")):
        for module in imported_modules(path):
            top = module.split(".")[0]
            assert top in stdlib or top in {"torch", "triton", "__future__"} or top == "kernels", (
                f"{path.name} imports {module}"
            )


def test_no_import_cycle():
    modules = {module_name(p): p for p in package_modules()}
    edges = {name: {m for m in imported_modules(path) if m in modules and m != name} for name, path in modules.items()}
    cycles = [start for start in modules if start in _reachable(edges, start)]
    assert not cycles, f"import cycles through {', '.join(cycles)}"


def _reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    stack = list(edges.get(start, ()))
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(edges.get(node, ()))
    return seen


def _modules_after(statement: str, cwd: Path | None = None) -> set[str]:
    code = f"{statement}\nimport sys\nprint(' '.join(sorted(m.split('.')[0] for m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=cwd)
    return set(out.stdout.split())


def test_declaring_validating_and_planning_stay_light():
    loaded = _modules_after(
        "import decisionflow; from decisionflow.spec import load_rubric, make_plan, decision, resolve_rubric"
    )
    assert not {"torch", "transformers", "rich"} & loaded


def test_the_cli_starts_without_the_engine():
    loaded = _modules_after("import decisionflow.cli")
    assert not {"torch", "transformers"} & loaded


def test_transformers_imports_cleanly_from_the_repository_root():
    """`kernels` is another package's name that transformers probes for: ours must never answer."""
    code = (
        "import sys; sys.path.insert(0, '');"
        "import transformers;"
        "from transformers.utils.import_utils import is_kernels_available;"
        "from transformers import LlamaConfig, LlamaForCausalLM;"
        "LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,"
        " num_attention_heads=2, num_key_value_heads=1));"
        "kernels = sys.modules.get('kernels');"
        "print(is_kernels_available(), getattr(kernels, '__file__', None))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    # transformers >= 5.25 depends on Hugging Face's own `kernels` package, so the name may well resolve:
    # to that package, never to this repository's folder.
    _, where = out.stdout.split()
    assert where == "None" or not Path(where).resolve().is_relative_to(KERNELS.resolve()), where
    assert not (KERNELS / "__init__.py").exists()


@pytest.mark.parametrize("name", ["decisionflow_kernels.reference"])
def test_the_kernels_import_under_their_own_name(name):
    import importlib

    module = importlib.import_module(name)
    assert Path(module.__file__).parent == KERNELS
