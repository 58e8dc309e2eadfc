#!/usr/bin/env bash
# One sanitizer phase of scripts/test.sh: configures and builds a sanitizer build in its own
# directory, then runs its part of the suite through CTest. docs/design.md §11.1 says which part
# and why; the lists are here, one test binary (CTest label) per line.
#   scripts/test_sanitized.sh asan   ASan+UBSan (clang), build-asan, also builds the fuzz targets
#   scripts/test_sanitized.sh tsan   TSan (gcc), build-tsan
# Extra arguments go to CTest. A sanitizer report fails the test that hit it (Note [Sanitizer
# flags] in cmake/sanitize.cmake), and so this script.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: test_sanitized.sh asan|tsan [ctest args]}
shift
source scripts/jobs.sh

case $kind in
  asan)
    build_dir=${STRATA_ASAN_BUILD_DIR:-build-asan}
    cmake_args=(-DCMAKE_CXX_COMPILER=clang++ "-DSTRATA_SANITIZE=address,undefined" -DSTRATA_FUZZ=ON)
    # Every test binary and shell test but: the PyTorch parity checks, which spend their time
    # in Python, not in our code (the same C++ runs in cli_train.sh and the test binaries); the
    # tokenizer reference checks, which spend theirs in node and Python and need the
    # tokenizer_check tool (the same C++ runs in the test_tokenizer* binaries and
    # tokenizer_cli.sh); the CUDA tests, which need a GPU and whose lambdas capture structured
    # bindings (clang 14 refuses that C++20 rule); the ranks under mpirun (dist_mpi.sh,
    # dist_collectives.sh), whose time goes to process launch and an uninstrumented MPI library
    # (the code of ours they run, the all-reduce's arithmetic and the plans with collectives,
    # runs here in test_dist and test_schedule_plans). Found from tests/, so a new test is in
    # this phase unlisted.
    tests=()
    for f in tests/test_*.cpp tests/*.sh; do
      name=$(basename "${f%.*}")
      case $name in test_util | test_cuda_backend | parity_torch | parity_torch_llama | parity_torch_lora | parity_torch_llama_lora | parity_torch_masked | export_torch | val_torch | sample_torch | import_torch | nf4_torch) continue ;; esac
      case $name in tokenizer_gpt2 | tokenizer_llama3 | tokenizer_sentencepiece | tokenizer_unicode) continue ;; esac
      case $name in dist_mpi | dist_collectives) continue ;; esac
      tests+=("$name")
    done
    extra_targets=(strata export_logits)  # finetune_llama.sh runs export_logits too
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    ;;
  tsan)
    build_dir=${STRATA_TSAN_BUILD_DIR:-build-tsan}
    cmake_args=(-DCMAKE_CXX_COMPILER=g++ -DSTRATA_SANITIZE=thread)
    # Note [TSan subset]: the binaries whose code starts threads of its own (the executor, the
    # storage engines and the store, the offloaded trainers and checkpoints on top of them), and
    # two of them again on cpu-discrete, whose device tasks are ordered by events (Note [Ordering
    # by events] in src/train/offload_actions.h): a missing wait is a race TSan reports.
    tests=(
      test_executor test_io_engine test_configured_engine test_rate_limited_engine
      test_fault_injector test_tensor_store test_store_sharing test_happens_before
      test_offload_faults test_checkpoint test_checkpoint_shards test_state_snapshot
      test_offload_faults_discrete test_state_snapshot_discrete
    )
    export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
    # Note [TSan subset]: OpenMP teams of one thread (libgomp is not instrumented).
    export OMP_NUM_THREADS=1
    extra_targets=()
    ;;
  *)
    echo "test_sanitized.sh: unknown kind '$kind' (asan or tsan)" >&2
    exit 2
    ;;
esac

cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=OFF \
  "${cmake_args[@]}" >/dev/null
targets=("${tests[@]}" "${extra_targets[@]}")
if [ "$kind" = asan ]; then
  for corpus in fuzz/corpus/*/; do targets+=("fuzz_$(basename "$corpus")"); done
fi
# Shell tests are not build targets: they need the strata binary (and the extra targets).
build_targets=()
for t in "${targets[@]}"; do
  # A "<binary>_discrete" label is that binary run on cpu-discrete (tests/CMakeLists.txt).
  [ -f "tests/$t.sh" ] && build_targets+=(strata) || build_targets+=("${t%_discrete}")
done
mapfile -t build_targets < <(printf '%s\n' "${build_targets[@]}" | sort -u)
cmake --build "$build_dir" -j "$jobs" --target "${build_targets[@]}"

label_re="^($(IFS='|'; echo "${tests[*]}"))\$"
ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" -L "$label_re" "$@"
