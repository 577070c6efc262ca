#!/usr/bin/env bash
# Regenerates docs/screenshot.png: a real screenshot of the studio in an X server (Xvfb) while it
# trains a zoo model it started (symtune --run), with the latency overlay on. The studio saves
# the screen itself once the run has done STEPS steps and per-node figures are painted, stops the
# run and quits.
#   scripts/screenshot.sh [OUTPUT.png] [SESSION] [STEPS]
# OVERLAY (latency, memory, flops, gradnorm, gpu-time, kernels, binding, remat) picks the overlay.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
APT_PACKAGES+=(xvfb x11-utils)
ensure_deps
build --target symtune symtune-runner
out=${1:-$SYMTUNE_ROOT/docs/screenshot.png}
steps=${3:-40}
display=:$((90 + RANDOM % 9))
Xvfb "$display" -screen 0 1600x1000x24 -nolisten tcp &
xvfb=$!
# Fresh settings and data folders: the window comes up in its default layout, and the run's
# folder (session copy, runner log) goes away afterwards.
scratch=$(mktemp -d)
trap 'kill $xvfb 2>/dev/null || true; rm -rf "$scratch"' EXIT
# The default: the dynamic-branch ResNet (ci preset) with two built-in rules in force.
session=${2:-$scratch/session.json}
[ -n "${2:-}" ] || cat > "$session" <<'JSON'
{"format": "symtune-session", "version": 1, "name": "dynamic-resnet studio",
 "model": {"zoo": "dynamic_resnet", "preset": "ci"},
 "run": {"steps": 100000, "threads": 1},
 "rules": {"enable": ["nan_guard", "gradient_steering"]}}
JSON
for _ in $(seq 50); do xdpyinfo -display "$display" >/dev/null 2>&1 && break; sleep 0.1; done
DISPLAY=$display QT_QPA_PLATFORM=xcb XDG_CONFIG_HOME=$scratch/config XDG_DATA_HOME=$scratch/data \
  timeout 600 "$SYMTUNE_BUILD_DIR/bin/symtune" --run "$session" --overlay "${OVERLAY:-latency}" \
  --screenshot "$out" --screenshot-after "$steps"
log "wrote $out"
