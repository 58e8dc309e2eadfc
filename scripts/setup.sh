#!/usr/bin/env bash
# Installs every Debian package Strata's build, tests and benchmarks need, then builds.
# Idempotent: packages already present are not touched; re-running only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config   # toolchain
  libgtest-dev googletest                        # tests
  libopenblas-openmp-dev                         # sgemm, sharing our OpenMP threads
  nlohmann-json3-dev                             # config and metadata
  liburing-dev                                   # the io_uring storage engine
  fio                                            # reference for the storage benchmark
  python3 python3-torch python3-numpy            # the PyTorch parity reference and benchmarks
  clang-format                                   # style
  clang libclang-rt-14-dev libomp-14-dev         # ASan+UBSan and libFuzzer builds (test.sh)
  llvm                                           # llvm-symbolizer: sanitizer reports with lines
  chromium                                       # renders the run report in a browser test
)
# (gcc's TSan runtime, libtsan2, comes with build-essential.)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

build_dir=${STRATA_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build_dir" -j "$(nproc)"
