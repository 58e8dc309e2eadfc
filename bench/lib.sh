# Sourced by the bench scripts, from the repository root: the build directory
# ($STRATA_BUILD_DIR, default build) and the strata binary to run ($STRATA_BIN, or the build's,
# brought up to date first so a benchmark never measures a stale binary).
source "$(dirname "${BASH_SOURCE[0]}")/quiet.sh"
build_dir=${STRATA_BUILD_DIR:-build}
if [ -z "${STRATA_BIN:-}" ]; then
  cmake --build "$build_dir" --target strata >/dev/null
  STRATA_BIN=$build_dir/strata
fi
