#!/usr/bin/env bash
# Regenerates docs/screenshot.png: the studio in a real X server (Xvfb) with the demo session open.
#   scripts/screenshot.sh [OUTPUT.png]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
APT_PACKAGES+=(xvfb imagemagick x11-utils)
ensure_deps
build --target symtune
out=${1:-$SYMTUNE_ROOT/docs/screenshot.png}
display=:$((90 + RANDOM % 9))
Xvfb "$display" -screen 0 1280x800x24 -nolisten tcp &
xvfb=$!
trap 'kill $studio $xvfb 2>/dev/null || true' EXIT
for _ in $(seq 50); do xdpyinfo -display "$display" >/dev/null 2>&1 && break; sleep 0.1; done
# A fresh settings folder so the window comes up in its default layout.
settings=$(mktemp -d)
DISPLAY=$display QT_QPA_PLATFORM=xcb XDG_CONFIG_HOME=$settings \
  "$SYMTUNE_BUILD_DIR/bin/symtune" "$SYMTUNE_ROOT/resources/sessions/demo.json" &
studio=$!
sleep 3
DISPLAY=$display import -window root "$out"
rm -rf "$settings"
log "wrote $out"
