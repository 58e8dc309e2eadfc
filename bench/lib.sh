# Sourced by the bench scripts, from the repository root: the build directory
# ($STRATA_BUILD_DIR, default build) and the strata binary to run ($STRATA_BIN, or the build's,
# brought up to date first so a benchmark never measures a stale binary).
source "$(dirname "${BASH_SOURCE[0]}")/quiet.sh"
build_dir=${STRATA_BUILD_DIR:-build}
if [ -z "${STRATA_BIN:-}" ]; then
  cmake --build "$build_dir" --target strata >/dev/null
  STRATA_BIN=$build_dir/strata
fi

# bench_scratch NAME DIR NEED_KB: DIR, emptied, for the benchmark's files, removed when it exits;
# but when DIR's file system has less than NEED_KB free, NAME says how much it has and needs, and
# the benchmark exits 2 before it writes anything.
bench_scratch() {
  local name=$1 need_kb=$3 free_kb
  bench_scratch_dir=$2
  mkdir -p "$bench_scratch_dir"
  free_kb=$(df -Pk "$bench_scratch_dir" | awk 'NR == 2 { print $4 }')
  if [ "$free_kb" -lt "$need_kb" ]; then
    echo "$name: $bench_scratch_dir has $((free_kb / 1024)) MiB free, the benchmark needs" \
      "$((need_kb / 1024)) MiB" >&2
    exit 2
  fi
  rm -rf "$bench_scratch_dir" && mkdir -p "$bench_scratch_dir"
  trap 'rm -rf "$bench_scratch_dir"' EXIT
}
