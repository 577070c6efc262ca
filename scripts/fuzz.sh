#!/usr/bin/env bash
# The fuzz targets (tests/fuzz/): builds them with clang's libFuzzer, AddressSanitizer and
# UndefinedBehaviorSanitizer into build/fuzz, then runs one for SECONDS (default 300) on a working
# copy of its seed corpus: TARGET rule_parser (the default; the rule language) or attach_frame (the
# attach protocol's frame decoder). libFuzzer's final statistics (executions, coverage) are
# printed; the exit status is non-zero on a finding, whose reproducer libFuzzer writes to
# build/fuzz/.
#
#   scripts/fuzz.sh [SECONDS] [TARGET]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
seconds=${1:-300}
target=${2:-rule_parser}
case "$target" in
  rule_parser) extra=(-max_len=4096 "-dict=$ROOT/tests/fuzz/rule_parser.dict") ;;
  attach_frame) extra=(-max_len=65536) ;;
  *) echo "fuzz.sh: no target $target (rule_parser, attach_frame)" >&2; exit 2 ;;
esac

if ! command -v clang++ > /dev/null; then
  echo "fuzz.sh: needs clang (libFuzzer): sudo apt-get install clang" >&2
  exit 2
fi
cmake -S tests/fuzz -B build/fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ > /dev/null
cmake --build build/fuzz

corpus=build/fuzz/corpus/$target
mkdir -p "$corpus"
# The seeds the corpus lacks; what the fuzzer added stays. (Not `cp -n`: coreutils 9.2 to 9.4
# make it fail when it skips a file, which stopped the script on its second run.)
for seed in "tests/fuzz/corpus/$target"/*; do
  [ -e "$corpus/$(basename "$seed")" ] || cp "$seed" "$corpus/"
done
cd build/fuzz
"./${target}_fuzz" -max_total_time="$seconds" -print_final_stats=1 "${extra[@]}" \
  -artifact_prefix="$ROOT/build/fuzz/" "$ROOT/$corpus"
