#!/usr/bin/env bash
# The Python anchor reproduces the engine's first loss: the harness exports the zoo's models (ci
# preset, initial parameters and batches) and trains them with its `script` mode, then
# bench/python/anchor.py rebuilds every model in eager PyTorch from the export and checks that its
# step-0 loss equals the engine's (same parameters and same data give the same loss).
#   tests/bench/python_anchor_test.sh BENCH_BIN ANCHOR_PY MODELS_DIR TMPDIR
# Needs python3 with torch importable (ctest sets PYTHONPATH).
set -euo pipefail

if [ $# -ne 4 ]; then
  echo "usage: $0 BENCH_BIN ANCHOR_PY MODELS_DIR TMPDIR" >&2
  exit 2
fi
BENCH_BIN=$1
ANCHOR_PY=$2
MODELS_DIR=$3
TMP=$4

rm -rf "$TMP/export"
mkdir -p "$TMP"

"$BENCH_BIN" --preset ci --models all --modes script --steps 2 --warmup 1 \
  --export-anchor "$TMP/export" --output "$TMP/engine.json"

python3 "$ANCHOR_PY" --export "$TMP/export" --models-dir "$MODELS_DIR" --device cpu \
  --modes python-eager --engine-results "$TMP/engine.json" \
  --check-first-loss "$TMP/engine.json" --output "$TMP/python.json"
