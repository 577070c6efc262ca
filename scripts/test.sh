#!/usr/bin/env bash
# The test suite: installs what is missing, builds incrementally, runs every test with CTest.
# Serial: the LibTorch tests use every core themselves. Headless (Qt's offscreen platform); GPU tests skip themselves where no CUDA device is present.
#   scripts/test.sh [extra ctest options, e.g. -R engine]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ensure_deps
build
cd "$SYMTUNE_BUILD_DIR"
exec ctest --output-on-failure --no-tests=error "$@"
