#!/usr/bin/env bash
# scripts/gpu-check.sh must not report success when a CUDA row was skipped on a GPU machine: its
# verdict is run on results folders made to look like a GPU machine's (simulated), one clean and
# the others each with one thing wrong. Usage: gpu_check_verdict_test.sh GPU_CHECK_SCRIPT
set -u
script=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

# A ctest -V log of a run where everything passed and every CUDA row ran.
clean_log() {
  cat <<'LOG'
test 12
    Start 12: kernels.grad_clip
12: [doctest] test cases:  6 |  6 passed | 0 failed | 0 skipped
12/40 Test #12: kernels.grad_clip ................   Passed    1.20 sec
100% tests passed, 0 tests failed out of 40
LOG
}

# expect NAME WANT_EXIT STATUS [FILE CONTENT]: a results folder with ctest.log (or not), verdict
# run on it with STATUS, its exit compared with WANT_EXIT ("0" or "nonzero").
expect() {
  local name=$1 want=$2 status=$3 dir="$work/$1"
  mkdir -p "$dir"
  case $name in
    clean) clean_log > "$dir/ctest.log" ;;
    skipped-row)
      { clean_log; echo "23: [doctest] kernels.bias_gelu: MESSAGE: CUDA rows skipped: no CUDA device here"; } \
        > "$dir/ctest.log" ;;
    skipped-build) clean_log | sed '2a 7: MESSAGE: CUDA rows skipped: this build has no CUDA kernels (SYMTUNE_WITH_CUDA=OFF)' \
        > "$dir/ctest.log" ;;
    step-failed) clean_log > "$dir/ctest.log" ;;
    no-log) ;;
    cut-short) clean_log | head -3 > "$dir/ctest.log" ;;
  esac
  local out rc
  out=$(bash "$script" --verdict "$dir" "$status" 2>&1)
  rc=$?
  if { [ "$want" = 0 ] && [ $rc -ne 0 ]; } || { [ "$want" = nonzero ] && [ $rc -eq 0 ]; }; then
    echo "FAIL $name: exit $rc, wanted $want; it said:"
    echo "$out" | sed 's/^/    /'
    failures=$((failures + 1))
    return
  fi
  if [ "$want" = nonzero ] && ! grep -q "gpu-check: FAILED" "$dir/verdict.txt"; then
    echo "FAIL $name: verdict.txt does not say FAILED"
    failures=$((failures + 1))
    return
  fi
  # Not the verdict's words: on the GPU machine this test's own output is in the ctest log the
  # real verdict reads, and a quoted "CUDA rows skipped" line there would fail it.
  echo "ok   $name: exit $rc"
}

expect clean 0 0
expect skipped-row nonzero 0
expect skipped-build nonzero 0
expect step-failed nonzero 1
expect no-log nonzero 0
expect cut-short nonzero 0

# The skipped row is named, so the log says which suite went untested.
grep -q "CUDA rows skipped: no CUDA device here" "$work/skipped-row/verdict.txt" || {
  echo "FAIL skipped-row: the verdict does not quote the skipped row"
  failures=$((failures + 1))
}
# The checks end in the verdict: the call exits with the same function's status.
grep -A1 '^verdict "\$OUT" "\$status"$' "$script" | tail -1 | grep -q '^exit \$?$' || {
  echo "FAIL: $script's checks do not end with their verdict"
  failures=$((failures + 1))
}

[ $failures -eq 0 ] && echo "gpu-check verdict: all cases as expected"
exit $((failures > 0))
