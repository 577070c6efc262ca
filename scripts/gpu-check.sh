#!/usr/bin/env bash
# The GPU checks and benchmarks, for the GPU machine (the device tool), in two calls. Both build
# the engine, kernels, runner and the Qt-free test suites with the `gpu` preset (no Qt). The
# first runs the GPU checks, traces the demo with CUPTI and runs every suite's CUDA rows:
# machine.txt, build.log, gpu-check.json, demo.log, demo-report.json, demo-trace.json,
# ctest.log, and verdict.txt, which says what passed. The second (--bench) runs the benchmarks:
# the six-model suite, bench-gpu.json (the engine's modes, symtune-bench), then
# bench-gpu-python.json and bench-gpu-compile.json (PyTorch eager and torch.compile on the same
# models and batches, bench/python/anchor.py), bench-optim-{adamw,sgd}.json, bench-kernels.json
# and bench-telemetry.json, within the call's 570 s. Results go under $OUT (default
# bench-results/).
#
# Here, once before carrying:   scripts/gpu-check.sh --prepare   (copies nlohmann/json's, Asio's
#                                                 and doctest's headers into the ignored
#                                                 .deps/include)
# There:                        scripts/gpu-check.sh --bundle     (run with carry: [".deps"];
#                                                 everything comes back in gpu-check.tar.gz)
# Then, at once, while warm:     scripts/gpu-check.sh --bundle --bench   (the benchmarks, on
#                                                 the build the first call left)
# Its judgement alone:          scripts/gpu-check.sh --verdict DIR STATUS
#                               (what the script decides from a results folder and the status of
#                               the steps before; tests/scripts/gpu_check_verdict_test.sh)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1

# The verdict: success only when every step before succeeded (STATUS 0), the suites ran (their
# log is there and CTest finished), and no suite skipped its CUDA rows — a skip on this machine
# means a CUDA path went untested, so it is a failure however green the rest is.
verdict() {
  local dir=$1 status=$2 problems=()
  [ "$status" = 0 ] || problems+=("a step failed (status $status)")
  if [ ! -s "$dir/ctest.log" ]; then
    problems+=("no ctest.log: the test suites did not run")
  else
    grep -q "tests passed" "$dir/ctest.log" || problems+=("ctest.log has no CTest summary")
    if grep -n "CUDA rows skipped" "$dir/ctest.log" > "$dir/cuda-rows-skipped.txt"; then
      problems+=("CUDA rows were skipped on a machine with a GPU: $(head -3 "$dir/cuda-rows-skipped.txt" | tr '\n' ' ')")
    else
      rm -f "$dir/cuda-rows-skipped.txt"
    fi
  fi
  if [ ${#problems[@]} -eq 0 ]; then
    echo "gpu-check: passed" | tee "$dir/verdict.txt"
    return 0
  fi
  { echo "gpu-check: FAILED"; printf '  %s\n' "${problems[@]}"; } | tee "$dir/verdict.txt"
  return 1
}

if [ "${1:-}" = "--verdict" ]; then
  [ $# -eq 3 ] || { echo "usage: $0 --verdict DIR STATUS" >&2; exit 2; }
  verdict "$2" "$3"
  exit $?
fi

if [ "${1:-}" = "--prepare" ]; then
  # Every copy must land: a missing header here costs device minutes there.
  set -e
  mkdir -p .deps/include .deps/cuda-extras/include
  cp -r /usr/include/nlohmann /usr/include/asio /usr/include/asio.hpp /usr/include/doctest \
    /usr/include/zlib.h /usr/include/zconf.h .deps/include/
  # zlib (the engine reads deflated .npz members) for a machine without its -dev package: the
  # headers above and the library under the linker's name; ZLIB_ROOT points CMake at them.
  mkdir -p .deps/lib
  cp -L "$(pkg-config --variable=libdir zlib)/libz.so" .deps/lib/libz.so
  # libpng and libjpeg (image folders) likewise, with their run-time names too (LD_LIBRARY_PATH
  # below), for a machine without them.
  libdir=$(pkg-config --variable=libdir libpng)
  cp /usr/include/png.h /usr/include/pngconf.h /usr/include/pnglibconf.h /usr/include/jpeglib.h \
    /usr/include/jmorecfg.h /usr/include/jerror.h \
    "$(dirname "$(find /usr/include -name jconfig.h | head -1)")/jconfig.h" .deps/include/
  cp -L "$libdir/libpng16.so" .deps/lib/libpng.so
  cp -L "$libdir/libpng16.so" .deps/lib/libpng16.so.16
  cp -L "$libdir/libjpeg.so" .deps/lib/libjpeg.so
  cp -L "$libdir/libjpeg.so" .deps/lib/libjpeg.so.62
  # CUPTI's and NVTX's headers, for a GPU machine whose toolkit lacks them (the build looks in
  # the toolkit first).
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  [ -x "$nvcc" ] || { echo "no nvcc on PATH or in /usr/local/cuda/bin: CUPTI's headers are the toolkit's" >&2; exit 1; }
  cuda_include=$(dirname "$nvcc")/../include
  cp -r "$cuda_include"/cupti*.h "$cuda_include"/Openacc "$cuda_include"/Openmp \
    "$cuda_include"/nvtx3 .deps/cuda-extras/include/
  echo "copied nlohmann/json, Asio, doctest, zlib, libpng, libjpeg, CUPTI's and NVTX's headers" \
    "into .deps; carry .deps"
  exit 0
fi

bundle=0 bench_only=0
for arg in "$@"; do
  case $arg in
    --bundle) bundle=1 ;;
    --bench) bench_only=1 ;;
    *) echo "usage: $0 [--bundle] [--bench] | --prepare | --verdict DIR STATUS" >&2; exit 2 ;;
  esac
done

OUT=${OUT:-$ROOT/bench-results}
mkdir -p "$OUT"
# --bundle (how the device tool runs it): the tool brings back at most 8 files from $OUT, so the
# results are written to a folder of their own and packed into $OUT/gpu-check.tar.gz, again every
# 30 s, so that a call cut off at its limit still brings back what it had done.
if [ "$bundle" = 1 ]; then
  bundle_to=$OUT
  OUT=$(mktemp -d /tmp/gpu-check.XXXXXX)
  bundle() {
    tar czf "$bundle_to/.gpu-check-$1.tar.gz" -C "$OUT" . &&
      mv -f "$bundle_to/.gpu-check-$1.tar.gz" "$bundle_to/gpu-check.tar.gz"
  }
  (while sleep 30; do bundle tick; done) &
  ticker=$!
  trap 'kill "$ticker" 2> /dev/null; wait "$ticker" 2> /dev/null; bundle final' EXIT
fi
t0=$(date +%s)
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  nvcc --version | tail -2
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  nproc
} > "$OUT/machine.txt"

if [ -f .deps/lib/libz.so ]; then
  export ZLIB_ROOT=$ROOT/.deps PNG_ROOT=$ROOT/.deps JPEG_ROOT=$ROOT/.deps
  export LD_LIBRARY_PATH=$ROOT/.deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
# LibTorch from the python3 on PATH (the machine's PyTorch), named outright: CMake's own search for
# an interpreter may find another python3 first, one without torch.
py=$(command -v python3)
torch_prefix=$("$py" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2> /dev/null)
if ! { cmake --preset gpu -DPython3_EXECUTABLE="$py" ${torch_prefix:+-DTorch_DIR="$torch_prefix/Torch"} &&
  cmake --build build/gpu -j "$(nproc)"; } > "$OUT/build.log" 2>&1; then
  tail -60 "$OUT/build.log"
  echo "build failed after $(( $(date +%s) - t0 )) s"
  exit 1
fi
echo "built in $(( $(date +%s) - t0 )) s"

status=0
if [ "$bench_only" = 0 ]; then
grep -q "SYMTUNE_WITH_CUPTI:BOOL=ON" build/gpu/CMakeCache.txt || {
  echo "the gpu build has no CUPTI: GPU activity tracing cannot be checked"; status=1; }
timeout 120 build/gpu/bin/symtune-gpu-check > "$OUT/gpu-check.json" 2>&1 || status=1

# The demo session trained on the GPU through the batch runner, its first steps traced: the
# trace must hold GPU lanes (CUPTI's kernels) linked to the ops that launched them.
sed 's/"device": "auto"/"device": "cuda"/' resources/sessions/demo.json > "$OUT/.demo-gpu.json"
timeout 120 build/gpu/bin/symtune-runner --batch "$OUT/.demo-gpu.json" \
  --report "$OUT/demo-report.json" --trace "$OUT/demo-trace.json" --trace-steps 3 \
  --progress-interval 2 > "$OUT/demo.log" 2>&1 || status=1
rm -f "$OUT/.demo-gpu.json"
python3 - "$OUT/demo-trace.json" "$OUT/demo-report.json" <<'PY' || status=1
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
timing = json.load(open(sys.argv[2])).get("device_timing")
gpu = [e for e in events if e.get("ph") == "X" and e.get("pid", 0) >= 100]
kernels = [e for e in gpu if e.get("cat") == "kernel"]
flows = [e for e in events if e.get("ph") == "f"]
on_nodes = [e for e in gpu if "node" in e.get("args", {})]
print(f"demo trace: {len(gpu)} GPU activities ({len(kernels)} kernels), {len(flows)} launch "
      f"arrows, {len(on_nodes)} on graph nodes; device timing: {timing}")
sys.exit(0 if kernels and flows and on_nodes and timing == "cupti" else 1)
PY

# -V: every test's output, so that a skipped CUDA row shows. The Qt-free suites (every suite of
# the engine, kernels and core) print "CUDA rows skipped: ..." where they find no GPU
# (tests/common/cuda_rows.h); here there is one, so the verdict fails on any such line. The
# suites stop by GPU_CHECK_CTEST_BY seconds into the call (default 540; a suite still running
# then fails, and the verdict with it), so that the results come back whole; each test case's
# time is printed (SYMTUNE_TEST_DURATIONS), to find what is slow on this machine.
stop_at=$(date -d "@$(( t0 + ${GPU_CHECK_CTEST_BY:-540} ))" +%H:%M:%S)
# gpu.check is the symtune-gpu-check run above: not twice.
(cd build/gpu && SYMTUNE_TEST_DURATIONS=1 ctest -V -j 12 -E '^gpu\.check$' --stop-time "$stop_at") \
  > "$OUT/ctest.log" 2>&1 || status=1
grep -E "^[0-9]+% tests passed|tests failed|\(Failed\)|\*\*\*" "$OUT/ctest.log" | tail -30

cat "$OUT/gpu-check.json"
tail -5 "$OUT/demo.log"
echo "after $(( $(date +%s) - t0 )) s"
verdict "$OUT" "$status"
exit $?
fi

# --bench: the benchmarks, in a call of their own (on an H200, 2026-12-04, the build took 271 s
# and the suites ran past the rest of the call, so the checks and the benchmarks do not fit one
# call); on a machine still warm from the checks, the build is already there. Within the call's
# budget (GPU_CHECK_BUDGET seconds, default 570: the device tool allows 600 a call; less when the
# session's device time left is less), in order of what the issues ask: the six models' gpu
# presets in the modes DynaCompiler is measured in (op by op, bound, TorchScript;
# GPU_CHECK_MODES for others, such as checkpoint and selective) with about half of it, PyTorch
# eager on the same parameters and batches (bench/python/anchor.py, exported to the machine's
# /tmp: the ResNet's batches are large), the fused optimizer, the fused kernels and the
# telemetry's overhead, then torch.compile with what is left. Each writes its own file, so what
# a cut-off leaves undone costs only itself.
left() { echo $(( ${GPU_CHECK_BUDGET:-570} - ($(date +%s) - t0) )); }
# Up to $1 seconds, never past the budget (less 10 s for the summary): 0 when nothing is left.
capped() { local most=$(( $(left) - 10 )); [ "$most" -lt 0 ] && most=0; echo $(( $1 < most ? $1 : most )); }
# Runs a benchmark command for at most `capped $1` seconds, or says it was skipped.
bench_step() {
  local seconds; seconds=$(capped "$1"); shift
  if [ "$seconds" -lt 5 ]; then
    echo "skipped, $(left) s left of the budget: $*" >&2
    return 0
  fi
  timeout "$seconds" "$@"
}
export_dir=$(mktemp -d /tmp/symtune-anchor.XXXXXX)
suite=$(( $(left) / 2 ))
if [ "$suite" -lt 90 ]; then
  echo "six-model suite skipped: $(left) s left of the budget" | tee "$OUT/bench-gpu.log"
else
  timeout "$suite" build/gpu/bin/symtune-bench --preset gpu --steps 10 --warmup 3 \
    --modes "${GPU_CHECK_MODES:-eager,bind,script}" --baseline eager --budget $(( suite - 40 )) \
    --export-anchor "$export_dir" --output "$OUT/bench-gpu.json" \
    2> "$OUT/bench-gpu.log" || status=1
  tail -n 30 "$OUT/bench-gpu.log"
  timeout $(( $(left) / 3 )) python3 bench/python/anchor.py --export "$export_dir" --device cuda \
    --modes python-eager --engine-results "$OUT/bench-gpu.json" \
    --output "$OUT/bench-gpu-python.json" 2> "$OUT/bench-gpu-python.log" || status=1
  tail -n 20 "$OUT/bench-gpu-python.log"
  # Its ratios are across two processes run one after the other, once: the file says so (the CPU
  # figures come from bench/python/side_by_side.py, in lockstep, over several rounds).
  [ -s "$OUT/bench-gpu-python.json" ] && python3 - "$OUT/bench-gpu-python.json" <<'PY' || status=1
import json, sys
path = sys.argv[1]
with open(path) as f:
    report = json.load(f)
report["method"] = {"lockstep": False, "rounds": 1,
                    "note": "the engine, then PyTorch in another process: ratios across processes"}
with open(path, "w") as f:
    json.dump(report, f, indent=2)
PY
fi

# The fused optimizer step against torch::optim's on CUDA, on the ResNet-152 gpu preset's
# parameters (their CUDA rows run in kernels.fused_optim).
for opt in adamw sgd; do
  bench_step 45 build/gpu/bin/symtune-bench-optim --device cuda --preset gpu --optimizer "$opt" \
    --rounds 30 > "$OUT/bench-optim-$opt.json" 2> "$OUT/bench-optim-$opt.log" || status=1
done
# Fused ops against their ATen compositions on CUDA (their reference tables run in the suites).
bench_step 45 build/gpu/bin/symtune-bench-kernels --device cuda --rounds 20 \
  > "$OUT/bench-kernels.json" 2> "$OUT/bench-kernels.log" || status=1
# Telemetry overhead on the GPU preset (features-only and per-node against off; the GPU activity
# tracer against CUDA events).
bench_step 60 build/gpu/bin/symtune-bench-telemetry --preset gpu --steps 10 --model dynamic_resnet \
  > "$OUT/bench-telemetry.json" 2> "$OUT/bench-telemetry.log" || status=1
tail -n 5 "$OUT/bench-telemetry.log"

# torch.compile's default backend (inductor) needs Triton on CUDA; without it, aot_eager (the same
# graph capture, no code generation) — the log says which ran.
if [ -s "$OUT/bench-gpu.json" ] && [ "$(left)" -gt 30 ]; then
  backend=inductor
  python3 -c 'from torch.utils._triton import has_triton; raise SystemExit(not has_triton())' \
    2> /dev/null || backend=aot_eager
  echo "torch.compile backend: $backend" > "$OUT/bench-gpu-compile.log"
  timeout $(( $(left) - 10 )) python3 bench/python/anchor.py --export "$export_dir" \
    --device cuda --modes python-compile --compile-backend "$backend" \
    --engine-results "$OUT/bench-gpu.json" --output "$OUT/bench-gpu-compile.json" \
    2>> "$OUT/bench-gpu-compile.log" || status=1
  tail -n 20 "$OUT/bench-gpu-compile.log"
fi
rm -rf "$export_dir"

echo "after $(( $(date +%s) - t0 )) s; benchmarks $([ "$status" = 0 ] && echo ran || echo FAILED)"
exit "$status"
