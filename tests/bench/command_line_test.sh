#!/usr/bin/env bash
# symtune-bench refuses a wrong command line with status 2 and a line that names what is wrong,
# before it probes the machine or trains anything; and bench/python/anchor.py reads the engine's
# null losses (a NaN, as the harness writes it) as no agreement instead of failing.
#   tests/bench/command_line_test.sh BENCH_BIN ANCHOR_PY TMPDIR
# Needs python3 with torch importable (ctest sets PYTHONPATH).
set -euo pipefail

if [ $# -ne 3 ]; then
  echo "usage: $0 BENCH_BIN ANCHOR_PY TMPDIR" >&2
  exit 2
fi
BENCH_BIN=$1
ANCHOR_PY=$2
TMP=$3
mkdir -p "$TMP"

# refused WANT ARGS...: symtune-bench ARGS exits 2 and says WANT.
refused() {
  local want=$1
  shift
  local status=0
  "$BENCH_BIN" "$@" > /dev/null 2> "$TMP/said.txt" || status=$?
  if [ "$status" -ne 2 ] || ! grep -qF -- "$want" "$TMP/said.txt"; then
    echo "symtune-bench $*: exit $status, said \"$(cat "$TMP/said.txt")\"; expected 2 and \"$want\"" >&2
    exit 1
  fi
}

# A mode given twice ran twice: the harness took the last as the baseline, the anchor the first.
refused 'mode "script" is given twice' --models early_exit --modes script,eager,script
refused 'mode "remat:0.5" is given twice' --modes script,remat:0.5 --budgets 0.5
# What std::stod and std::stoi took: trailing text, hexadecimal, a leading space.
refused '--grid takes a share of the plain peak in (0, 1], got "0.5abc"' --grid 0.5abc
refused '--grid takes a share of the plain peak in (0, 1], got "0x0.8p0"' --grid 0x0.8p0
refused '--grid-bind takes a memory slack in [0, 1), got "0.1junk"' --grid 0.5 --grid-bind 0.1junk
refused '--steps needs a non-negative integer, got " 5"' --steps ' 5'
refused '--seed needs a non-negative integer, got "2147483648"' --seed 2147483648
refused '--grid takes a share of the plain peak in (0, 1], got "1e400"' --grid 1e400
# A bad value is not an unknown option.
refused '--memory-prediction: expected on or off, found yes' --memory-prediction yes
# Caught before the machine is probed, with the usage status.
refused 'the baseline mode "foo" is not among --modes' --baseline foo
refused 'the baseline mode "script" is not among --modes' --modes ''

PYTHONPATH="$(dirname "$ANCHOR_PY")${PYTHONPATH:+:$PYTHONPATH}" python3 - <<'PY'
import anchor
# The engine's baseline diverged at step 1: its loss is null there.
mode = {"losses": [2.3, 2.2], "samples_per_s": None, "peak_bytes": None}
baseline = {"losses": [2.3, None], "samples_per_s": None, "peak_bytes": None}
anchor.compare(mode, baseline)
assert mode["loss_agreement"]["nonfinite_steps"] == 1, mode["loss_agreement"]
assert mode["loss_agreement"]["max_rel_dev"] is None, mode["loss_agreement"]
engine = {"config": {"baseline": "script"},
          "models": [{"model": "m", "modes": [{"mode": "script", "losses": [None]}]}]}
python = [{"model": "m", "modes": [{"mode": "python-eager", "losses": [1.0]}]}]
assert anchor.check_first_loss(python, engine, 1e-6) is False
print("anchor: null losses are no agreement")
PY
echo "symtune-bench: every wrong command line refused"
