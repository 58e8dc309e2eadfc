#!/usr/bin/env bash
# Runs the whole test suite: installs what is missing, builds, then CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
build_dir=${STRATA_BUILD_DIR:-build}
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" "$@"
