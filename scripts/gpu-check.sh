#!/usr/bin/env bash
# Every GPU check in one call, for the GPU machine (the device tool): builds the engine, kernels,
# runner and GPU checks with the `gpu` preset (no Qt), runs them, and writes the results under
# $OUT (default bench-results/): machine.txt, build.log, gpu-check.json, ctest.log, demo.log,
# demo-report.json, bench-telemetry.json, bench-optim-{adamw,sgd}.json, bench-kernels.json, and
# the six-model benchmark: bench-gpu.json (the engine's modes, symtune-bench) and
# bench-gpu-python.json (PyTorch eager and torch.compile on the same models and batches,
# bench/python/anchor.py), within a 9-minute budget together.
#
# Here, once before carrying:   scripts/gpu-check.sh --prepare   (copies nlohmann/json's, Asio's
#                                                 and doctest's headers into the ignored
#                                                 .deps/include)
# There:                        scripts/gpu-check.sh              (run with carry: [".deps"])
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

if [ "${1:-}" = "--prepare" ]; then
  mkdir -p .deps/include
  cp -r /usr/include/nlohmann /usr/include/asio /usr/include/asio.hpp /usr/include/doctest \
    .deps/include/
  echo "copied nlohmann/json, Asio and doctest into .deps/include; carry .deps"
  exit 0
fi

OUT=${OUT:-$ROOT/bench-results}
mkdir -p "$OUT"
t0=$(date +%s)
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  nvcc --version | tail -2
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  nproc
} > "$OUT/machine.txt"

if ! { cmake --preset gpu && cmake --build build/gpu -j "$(nproc)"; } > "$OUT/build.log" 2>&1; then
  tail -60 "$OUT/build.log"
  echo "build failed after $(( $(date +%s) - t0 )) s"
  exit 1
fi
echo "built in $(( $(date +%s) - t0 )) s"

status=0
build/gpu/bin/symtune-gpu-check > "$OUT/gpu-check.json" 2>&1 || status=1
# -V: every test's output, so that a skipped CUDA row shows. The Qt-free suites print "CUDA rows
# skipped: ..." where they find no GPU (tests/common/cuda_rows.h); here there is one, so any such
# line fails the check.
(cd build/gpu && ctest -V) > "$OUT/ctest.log" 2>&1 || status=1
if grep -n "CUDA rows skipped" "$OUT/ctest.log" > "$OUT/cuda-rows-skipped.txt"; then
  echo "CUDA rows were skipped on a machine with a GPU:"
  cat "$OUT/cuda-rows-skipped.txt"
  status=1
fi

# The demo session trained on the GPU through the batch runner.
sed 's/"device": "auto"/"device": "cuda"/' resources/sessions/demo.json > "$OUT/.demo-gpu.json"
build/gpu/bin/symtune-runner --batch "$OUT/.demo-gpu.json" --report "$OUT/demo-report.json" \
  --progress-interval 2 > "$OUT/demo.log" 2>&1 || status=1
rm -f "$OUT/.demo-gpu.json"

# The fused optimizer step against torch::optim's on CUDA, on the ResNet-152 gpu preset's
# parameters. (kernels.fused_optim's CUDA rows do not run above yet: it is still a Qt Test suite,
# which the gpu preset does not build.)
for opt in adamw sgd; do
  timeout 60 build/gpu/bin/symtune-bench-optim --device cuda --preset gpu --optimizer "$opt" \
    --rounds 30 > "$OUT/bench-optim-$opt.json" 2> "$OUT/bench-optim-$opt.log" || status=1
done

# Fused ops against their ATen compositions on CUDA. (Of the kernels' reference tables only
# kernels.grad_stats is Qt-free yet, so only its CUDA rows run in ctest above.)
timeout 60 build/gpu/bin/symtune-bench-kernels --device cuda --rounds 20 \
  > "$OUT/bench-kernels.json" 2> "$OUT/bench-kernels.log" || status=1

# Telemetry overhead on the GPU preset (features-only and per-node against off).
build/gpu/bin/symtune-bench-telemetry --preset gpu --steps 10 --model dynamic_resnet > "$OUT/bench-telemetry.json" \
  2> "$OUT/bench-telemetry.log" || status=1

# The six models' gpu presets in every mode, then the Python anchor on the same parameters and
# batches (exported to the machine's /tmp: the ResNet's batches are large). 9 minutes together.
export_dir=$(mktemp -d /tmp/symtune-anchor.XXXXXX)
timeout 360 build/gpu/bin/symtune-bench --preset gpu --steps 10 --warmup 3 --budget 270 \
  --export-anchor "$export_dir" --output "$OUT/bench-gpu.json" 2> "$OUT/bench-gpu.log" || status=1
# torch.compile's default backend (inductor) needs Triton on CUDA; without it, aot_eager (the same
# graph capture, no code generation) — the log says which ran.
backend=inductor
python3 -c 'from torch.utils._triton import has_triton; raise SystemExit(not has_triton())' \
  2> /dev/null || backend=aot_eager
echo "torch.compile backend: $backend" > "$OUT/bench-gpu-python.log"
timeout 180 python3 bench/python/anchor.py --export "$export_dir" --device cuda \
  --compile-backend "$backend" --engine-results "$OUT/bench-gpu.json" \
  --output "$OUT/bench-gpu-python.json" 2>> "$OUT/bench-gpu-python.log" || status=1
rm -rf "$export_dir"
tail -40 "$OUT/bench-gpu.log" "$OUT/bench-gpu-python.log"

cat "$OUT/gpu-check.json"
tail -5 "$OUT/ctest.log" "$OUT/demo.log"
echo "gpu-check: status $status after $(( $(date +%s) - t0 )) s"
exit $status
