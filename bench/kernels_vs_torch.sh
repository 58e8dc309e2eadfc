#!/usr/bin/env bash
# Strata vs PyTorch on the CPU, same shapes, same thread count, in one run:
#   block: forward+backward of a GPT-2-small block (C=768, NH=12, T=1024), B = 1..4
#   step:  one full training step of GPT-2 124M (B=1, T=1024): fwd, bwd, clip, AdamW
# Rounds alternate which side goes first; medians pool every timed repetition of all rounds.
# Last line: a JSON object with block_ratio_vs_torch (Strata tok/s / PyTorch tok/s, the smallest
# over B) and step_ratio_vs_torch.
#   usage: bench/kernels_vs_torch.sh [rounds=2] [threads=2]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
threads=${2:-2}
source bench/quiet.sh
build_dir=${STRATA_BUILD_DIR:-build}
cmake --build "$build_dir" --target bench_kernels >/dev/null

export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
# Both sides reuse freed memory instead of returning it to the kernel (see torch_bench.py's
# Note [Bench allocator]); the same setting for both keeps the comparison fair.
export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=$((1 << 40)) MALLOC_TOP_PAD_=$((1 << 30))
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

strata_block() { "$build_dir/bench/bench_kernels" block 3 | tail -n 1 >>"$out/strata_block.jsonl"; }
torch_block() { /usr/bin/python3 bench/torch_bench.py --mode block --threads "$threads" --reps 3 | tail -n 1 >>"$out/torch_block.jsonl"; }
strata_step() { "$build_dir/bench/bench_kernels" step 2 | tail -n 1 >>"$out/strata_step.jsonl"; }
torch_step() { /usr/bin/python3 bench/torch_bench.py --mode step --threads "$threads" --reps 2 | tail -n 1 >>"$out/torch_step.jsonl"; }

for ((r = 0; r < rounds; r++)); do
  echo "round $((r + 1))/$rounds" >&2
  if ((r % 2 == 0)); then strata_block; torch_block; torch_step; strata_step
  else torch_block; strata_block; strata_step; torch_step; fi
done
/usr/bin/python3 bench/compare_vs_torch.py "$out" "$threads"
