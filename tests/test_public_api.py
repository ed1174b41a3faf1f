"""The public API holds: every name the docs import comes from `decisionflow` (or one of the three public entry
modules), every public name resolves, `import decisionflow` stays free of torch, and the folder maps in
`decisionflow/__init__.py` and docs/engine.md name every step and room the layout test knows."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

from test_layout import PACKAGE, ROOMS, ROOT, RUNTIME, STEPS

import decisionflow

PUBLIC_MODULES = {"decisionflow", "decisionflow.serve", "decisionflow.scale", "decisionflow.integrations.langchain"}
"""Where a user imports from. Everything else is the package's inside, free to move."""

IMPORT = re.compile(
    r"\bfrom\s+(?P<module>decisionflow[\w.]*)\s+import\s+(?P<names>\([^)]*\)|[\w ,]+(?:,\s*\n\s*[\w ,]+)*)"
    r"|\bimport\s+(?P<plain>decisionflow\.[\w.]+)"
)


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "examples").rglob("*.py"))]


def documented_imports() -> list[tuple[str, str, list[str]]]:
    """(document, module, names) for every import of decisionflow written in a doc or example."""
    found = []
    for path in documents():
        for match in IMPORT.finditer(path.read_text(encoding="utf-8")):
            where = str(path.relative_to(ROOT))
            if match["plain"]:
                found.append((where, match["plain"], []))
                continue
            names = [name.split(" as ")[0].strip() for name in re.split(r"[,\s()]+", match["names"]) if name.strip()]
            found.append((where, match["module"], [name for name in names if name.isidentifier() and name != "as"]))
    return found


def test_the_docs_import_only_public_modules():
    imports = documented_imports()
    assert len(imports) >= 10, "the docs' imports were not found: the pattern no longer matches how they are written"
    private = [f"{where}: {module}" for where, module, _ in imports if module not in PUBLIC_MODULES]
    assert not private, "docs import from the package's inside (import these names from `decisionflow`):\n" + "\n".join(private)


def test_every_name_the_docs_import_exists():
    missing = []
    for where, module, names in documented_imports():
        imported = importlib.import_module(module)
        missing += [f"{where}: {module}.{name}" for name in names if not hasattr(imported, name)]
    assert not missing, "\n".join(missing)


def test_every_public_name_resolves_and_the_engine_loads_lazily():
    assert all(getattr(decisionflow, name) is not None for name in decisionflow.__all__)
    assert {"Engine", "EngineOptions", "LoadedModel", "Heads", "Calibration", "Rubric", "DecisionflowError"} <= set(decisionflow.__all__)
    script = "import sys, decisionflow; assert 'torch' not in sys.modules and 'transformers' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", script], check=True, cwd=ROOT)


def test_every_error_class_is_public():
    errors = importlib.import_module("decisionflow.errors")
    classes = {name for name, value in vars(errors).items() if isinstance(value, type) and issubclass(value, Exception)}
    assert classes <= set(decisionflow.__all__), f"errors not exported: {classes - set(decisionflow.__all__)}"


def where_the_code_is() -> str:
    text = (ROOT / "docs" / "engine.md").read_text(encoding="utf-8")
    section = text.split("## Where the code is", 1)[1]
    return section.split("\n## ", 1)[0]


def test_the_folder_maps_name_every_step_and_room():
    package_map = ast.get_docstring(ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))) or ""
    doc_map = where_the_code_is()
    top_modules = sorted(path.stem for path in RUNTIME.glob("*.py") if path.stem != "__init__")
    missing = [f"decisionflow/__init__.py does not name the step `{step}`" for step in STEPS if f"`{step}`" not in package_map]
    missing += [f"decisionflow/__init__.py does not name the room `runtime.{room}`" for room in ROOMS if f"`runtime.{room}`" not in package_map]
    missing += [f"docs/engine.md's map does not name `{step}/`" for step in STEPS if f"{step}/`" not in doc_map]
    missing += [f"docs/engine.md's map does not name `runtime/{room}/`" for room in ROOMS if f"`runtime/{room}/`" not in doc_map]
    missing += [f"docs/engine.md's map does not name runtime's `{module}.py`" for module in top_modules if f"`{module}.py`" not in doc_map]
    assert not missing, "\n".join(missing)
