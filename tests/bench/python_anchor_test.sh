#!/usr/bin/env bash
# The Python anchor reproduces the engine's first loss: the harness exports the zoo's models (ci
# preset, initial parameters and batches) and trains them with its `script` mode, then
# bench/python/anchor.py rebuilds every model in eager PyTorch from the export and checks that its
# step-0 loss equals the engine's (same parameters and same data give the same loss). Then
# bench/python/side_by_side.py runs the two in lockstep (Note [Lockstep with the anchor]) on two
# models and must summarize both, with PyTorch eager's losses those of the engine's baseline.
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

"$BENCH_BIN" --preset ci --models all --modes script --steps 2 --warmup 1 --cpu-memory retain \
  --export-anchor "$TMP/export" --output "$TMP/engine.json"

# Both keep freed CPU memory (run.cpu_memory "retain"), and say so.
python3 "$ANCHOR_PY" --export "$TMP/export" --models-dir "$MODELS_DIR" --device cpu \
  --modes python-eager --engine-results "$TMP/engine.json" --cpu-memory retain \
  --check-first-loss "$TMP/engine.json" --output "$TMP/python.json"
python3 - "$TMP/engine.json" "$TMP/python.json" <<'PY'
import json, sys
engine, python = (json.load(open(p)) for p in sys.argv[1:3])
assert engine["config"]["cpu_memory"] == "retain", engine["config"]
assert python["config"]["cpu_memory"] == "retain", python["config"]
PY

SIDE_BY_SIDE="$(dirname "$ANCHOR_PY")/side_by_side.py"
rm -rf "$TMP/lockstep"
python3 "$SIDE_BY_SIDE" --bench "$BENCH_BIN" --out "$TMP/lockstep" --rounds 1 --preset ci \
  --models tree_rnn,early_exit --modes script,eager --baseline eager --steps 2 --warmup 1 \
  > "$TMP/lockstep.md"
python3 - "$TMP/lockstep" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
summary = json.loads((out / "summary.json").read_text())
assert set(summary["models"]) == {"tree_rnn", "early_exit"}, summary["models"].keys()
for model, row in summary["models"].items():
    for key in ("script / eager", "eager / python-eager", "script / python-eager"):
        assert row["median"][key] > 0, (model, key)
    # Same parameters and batches: PyTorch eager's losses follow the engine's baseline's.
    assert row["python_loss_max_rel_dev"][0] < 1e-3, (model, row["python_loss_max_rel_dev"])
python = json.loads((out / "round1" / "python.json").read_text())
for model in python["models"]:
    (mode,) = model["modes"]
    assert len(mode["losses"]) == 3, (model["model"], mode["losses"])
print("lockstep: both models summarized")
PY
