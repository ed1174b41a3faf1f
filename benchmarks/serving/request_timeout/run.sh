#!/usr/bin/env bash
# What a request's deadline must allow, and what stopping abandoned work buys: docs/serving.md, "Timeouts".
# Run from anywhere on an otherwise idle machine. Each side runs from a temporary worktree of its commit: AFTER
# (default HEAD) measures both parts, BEFORE (default 5006e11, the last commit before requests carried a
# cancellation) the `abandoned` part. Writes this folder's results file.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/serving/request_timeout
AFTER=${AFTER:-HEAD}
BEFORE=${BEFORE:-5006e11}
OUT=$(mktemp -d)
trap 'for side in after before; do git worktree remove --force "$OUT/$side" 2>/dev/null || true; done; rm -rf "$OUT"' EXIT
run() {  # side, commit, parts
    git worktree add --quiet --detach "$OUT/$1" "$2"
    PYTHONPATH="$OUT/$1" .venv/bin/python "$PWD/$HERE/measure.py" --parts "$3" --repeats 5 --out "$OUT/$1.json"
}
run after "$AFTER" slowest,abandoned
run before "$BEFORE" abandoned
.venv/bin/python -m benchmarks.common merge $HERE/results.json after="$OUT/after.json" before="$OUT/before.json"
