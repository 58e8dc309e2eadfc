#!/usr/bin/env bash
# The fuzz phase of scripts/test.sh: each libFuzzer target in build-asan (built by
# `scripts/test_sanitized.sh asan`) replays its seed corpus fuzz/corpus/<name>/ and then fuzzes
# for STRATA_FUZZ_SECONDS (default 20) seconds. New inputs go to a scratch directory, never into
# the repository; a crashing input is kept as build-asan/fuzz-artifacts/<name>-crash-<sha1>, and
# fails this script. To fuzz longer by hand:
#   build-asan/fuzz/fuzz_config -max_total_time=3600 /tmp/new fuzz/corpus/config
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${STRATA_ASAN_BUILD_DIR:-build-asan}
seconds=${STRATA_FUZZ_SECONDS:-20}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$build_dir/fuzz-artifacts"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# One target per core at a time: each fuzzes on one thread for the same time as alone.
source scripts/jobs.sh
fuzz_one() {  # name corpus: fuzzes one target; its exit status is the verdict
  local name=$1 corpus=$2
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb / -malloc_limit_mb: an allocation an
  # input chose (Note [Bounded JSON nesting], §11) is a finding, not an out-of-memory kill.
  TMPDIR=$scratch/$name "$build_dir/fuzz/fuzz_$name" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 \
    -artifact_prefix="$build_dir/fuzz-artifacts/$name-" \
    "$scratch/$name/new" "$corpus" >"$scratch/$name.log" 2>&1
}

names=()
for corpus in fuzz/corpus/*/; do
  name=$(basename "$corpus")
  if [ ! -x "$build_dir/fuzz/fuzz_$name" ]; then
    echo "fuzz.sh: $build_dir/fuzz/fuzz_$name is missing (build it with" \
         "scripts/test_sanitized.sh asan)" >&2
    exit 2
  fi
  names+=("$name")
done
declare -A pids=()
running=0
for name in "${names[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true  # verdicts are read from each pid below
    running=$((running - 1))
  fi
  mkdir -p "$scratch/$name/new"
  fuzz_one "$name" "fuzz/corpus/$name/" &
  pids[$name]=$!
  running=$((running + 1))
done

status=0
for name in "${names[@]}"; do
  if wait "${pids[$name]}"; then
    echo "fuzz.sh: $name: $(grep -E '^stat::number_of_executed_units' "$scratch/$name.log" |
      awk '{print $2}') runs in ${seconds} s, no finding" >&2
  else
    status=1
    echo "fuzz.sh: $name FAILED; its log:" >&2
    tail -n 60 "$scratch/$name.log" >&2
  fi
done
exit $status
