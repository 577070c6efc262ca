#!/usr/bin/env bash
# The fuzz targets (tests/fuzz/): builds them with clang's libFuzzer, AddressSanitizer and
# UndefinedBehaviorSanitizer into build/fuzz, then runs the rule parser's for SECONDS (default 300)
# on a working copy of its seed corpus. libFuzzer's final statistics (executions, coverage) are
# printed; the exit status is non-zero on a finding, whose reproducer libFuzzer writes to
# build/fuzz/.
#
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
seconds=${1:-300}

if ! command -v clang++ > /dev/null; then
  echo "fuzz.sh: needs clang (libFuzzer): sudo apt-get install clang" >&2
  exit 2
fi
cmake -S tests/fuzz -B build/fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ > /dev/null
cmake --build build/fuzz

corpus=build/fuzz/corpus/rule_parser
mkdir -p "$corpus"
cp -n tests/fuzz/corpus/rule_parser/* "$corpus/"
cd build/fuzz
./rule_parser_fuzz -max_total_time="$seconds" -print_final_stats=1 -max_len=4096 \
  -dict="$ROOT/tests/fuzz/rule_parser.dict" -artifact_prefix="$ROOT/build/fuzz/" "$ROOT/$corpus"
