#!/usr/bin/env bash
# Runs the whole test suite: installs what is missing, builds, then, each phase timed
# (docs/design.md §11.1 has the measured times):
#   1. release  the Release build's whole suite (CTest; extra arguments go to this CTest)
#   2. asan     ASan+UBSan build (clang) running the suite but the PyTorch parity checks
#   3. tsan     TSan build (gcc) running the threaded subset (Note [TSan subset])
#   4. fuzz     every libFuzzer target replays its seed corpus, then fuzzes briefly
# Any failure, sanitizer report or fuzz finding fails the command.
set -euo pipefail
cd "$(dirname "$0")/.."

timings=()
phase() {
  local name=$1 start=$SECONDS
  shift
  echo "test.sh: phase $name" >&2
  "$@"
  timings+=("$name $((SECONDS - start)) s")
  echo "test.sh: phase $name passed in $((SECONDS - start)) s" >&2
}

release() {
  ./scripts/setup.sh
  local build_dir=${STRATA_BUILD_DIR:-build}
  source scripts/jobs.sh
  ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" "$@"
}

phase release release "$@"
phase asan ./scripts/test_sanitized.sh asan
phase tsan ./scripts/test_sanitized.sh tsan
phase fuzz ./scripts/fuzz.sh
echo "test.sh: all phases passed: $(IFS=,; echo "${timings[*]}")" >&2
