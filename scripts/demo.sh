#!/usr/bin/env bash
# The main job: installs what is missing, builds incrementally, then runs the bundled demo session
# headless (`symtune --batch`) and writes its report to build/demo-report.json.
#   scripts/demo.sh [extra symtune --batch options]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ensure_deps
build --target symtune symtune-runner
exec "$SYMTUNE_BUILD_DIR/bin/symtune" --batch "$SYMTUNE_ROOT/resources/sessions/demo.json" \
  --report "$SYMTUNE_ROOT/build/demo-report.json" "$@"
