#!/usr/bin/env bash
# bench/python/controller_windows.py reads the harness's per-step throughput (samples_per_s_steps)
# and compares the online controller with the default and the best fixed mode window by window:
# a short run of the ci tagger, then the script on it, whose windows must cover the run.
#   tests/bench/controller_windows_test.sh BENCH_BIN WINDOWS_PY TMPDIR
set -euo pipefail

if [ $# -ne 3 ]; then
  echo "usage: $0 BENCH_BIN WINDOWS_PY TMPDIR" >&2
  exit 2
fi
BENCH_BIN=$1
WINDOWS_PY=$2
TMP=$3
mkdir -p "$TMP"

"$BENCH_BIN" --preset ci --models dynamic_tagger --modes script,threads:1,micro:2+threads:1,online \
  --steps 8 --warmup 1 --output "$TMP/run.json" > /dev/null
python3 "$WINDOWS_PY" "$TMP/run.json" --default threads:1 --window 2 --warmup-steps 2 \
  --twin script --below 0.97 --output "$TMP/windows.json"
# A twin the run does not have is refused.
if python3 "$WINDOWS_PY" "$TMP/run.json" --default threads:1 --twin threads:3 > /dev/null 2>&1; then
  echo "a missing twin mode was not refused" >&2
  exit 1
fi
python3 - "$TMP/run.json" "$TMP/windows.json" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
windows = json.load(open(sys.argv[2]))
modes = {m["mode"]: m for m in run["models"][0]["modes"]}
for mode in modes.values():
    assert len(mode["samples_per_s_steps"]) == 8, mode["mode"]
# The controller's decisions, one per step with the warm-up's: what ran, and what it measured
# where it learnt from the step (not the first two).
decisions = modes["online"]["controller"]["steps"]
assert [d["step"] for d in decisions] == list(range(9)), decisions
assert decisions[0]["samples_per_s"] is None and decisions[1]["samples_per_s"] is None
assert all(d["chosen"].startswith("microbatches ") for d in decisions), decisions
assert len(windows["models"]) == 1
model = windows["models"][0]
assert model["model"] == "dynamic_tagger", model
assert model["mode"] == "online", model
def harmonic(v):
    return len(v) / sum(1 / x for x in v)
expected = (harmonic(modes["online"]["samples_per_s_steps"][2:]) /
            harmonic(modes["threads:1"]["samples_per_s_steps"][2:]))
assert abs(model["after_warmup_over_default"] - expected) < 1e-9 * expected, model
assert model["default"] == "threads:1"
assert model["best"] in ("threads:1", "micro:2+threads:1"), model["best"]
assert len(model["windows"]) == 4, model["windows"]
for w in model["windows"]:
    assert w["online_over_default"] > 0 and w["online_over_best"] > 0, w
assert model["lowest_over_default_after_first"] == min(
    w["online_over_default"] for w in model["windows"][1:])
# A window's ratio is the median of its steps' ratios (the same batch in both modes).
import statistics
def per_step(a, b, first, last):
    return statistics.median(x / y for x, y in zip(modes[a]["samples_per_s_steps"][first:last],
                                                 modes[b]["samples_per_s_steps"][first:last]))
for w in model["windows"]:
    first, last = w["steps"][0], w["steps"][1] + 1
    assert abs(w["online_over_default"] - per_step("online", "threads:1", first, last)) < 1e-12
    assert abs(w["online_over_best"] - per_step("online", model["best"], first, last)) < 1e-12
# From the warm-up on (steps 2-7: three windows of 2), the online mode's and the twin's.
assert model["twin"] == "script" and model["below"] == 0.97
for who, mode in (("online", "online"), ("twin", "script")):
    reading = model["from_warmup"][who]
    expected = [per_step(mode, "threads:1", i, i + 2) for i in (2, 4, 6)]
    assert reading["windows"] == expected, (who, reading, expected)
    assert reading["lowest"] == min(expected)
    assert reading["below"] == sum(1 for r in expected if r < 0.97)
print("controller windows: ok")
PY
