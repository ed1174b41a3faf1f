"""The `decisionflow` script's own exit: codes, messages and output survive leaving without teardown."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "decisionflow.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, check=False)


def test_success_prints_everything_and_exits_zero():
    done = _cli("plan", "workflows/support_triage.yaml", "--json")
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("}")  # the whole JSON object was flushed before leaving
    assert '"rounds"' in done.stdout


def test_failures_keep_their_exit_codes_and_messages(tmp_path):
    missing = _cli("validate", str(tmp_path / "missing.yaml"))
    assert missing.returncode == 1
    assert "missing.yaml" in missing.stderr
    usage = _cli("run", "workflows/sentiment.yaml")  # neither --text nor --input
    assert usage.returncode == 2
    assert usage.stderr.strip() == "error: give exactly one of --text or --input"


def test_version_is_the_installed_one():
    from importlib.metadata import version

    from typer.testing import CliRunner

    import decisionflow
    from decisionflow.cli import app

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"decisionflow {version('decisionflow')}" == f"decisionflow {decisionflow.__version__}"


def test_the_command_line_and_the_server_settings_load_without_the_web_stack_or_torch():
    """Every command starts by importing the command line; `serve` reads its defaults from the server's
    settings, which must not pull FastAPI (or torch) into `run`'s cold start."""
    probe = ("import sys, decisionflow.cli, decisionflow.serve; "
             "print(sorted(m for m in ('fastapi', 'starlette', 'uvicorn', 'torch') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=300, check=True)
    assert loaded.stdout.strip() == "[]"
    from decisionflow.cli.serve import LIMITS
    from decisionflow.serve import Limits

    assert LIMITS == Limits()
