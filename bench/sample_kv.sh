#!/usr/bin/env bash
# Sampling with the key/value cache and the blocks kept in memory (the default) against
# recomputing the window for every token (`--no-kv-cache`) and against reading every block from
# the checkpoint for every token (`--resident-bytes 0`, the way a model larger than memory
# samples, and the way every model sampled before this change) (Note [Sampling] in
# src/model/sample.h), side by side in one run, repeated, on one checkpoint.
#   The model: GPT-2 blocks, 8 x 512 (25M parameters), context 512, trained one step (the weights
#   do not matter to the speed); each run generates N greedy tokens after a 1-token prompt, so
#   the window grows from 1 to N+1 positions and never slides (N < 512). Both runs must print
#   the same tokens.
# Last line: JSON with the medians of seconds and tokens/s for each mode and the speedups.
#   usage: bench/sample_kv.sh [REPEATS=3] [TOKENS=256]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
repeats=${1:-3}
tokens=${2:-256}
dir=$build_dir/bench-sample
bench_scratch sample_kv "$dir" $((1024 * 1024))  # a 300 MB checkpoint and a margin
"$STRATA_BIN" train --set model.n_layer=8 --set model.n_embd=512 --set model.n_head=8 \
  --set model.context_length=512 --set train.seq_len=64 --set train.batch_size=1 \
  --set train.steps=1 --save-every 1 --checkpoint-dir "$dir/ckpt" --quiet 2>/dev/null

results=()
for r in $(seq "$repeats"); do
  for mode in cache recompute stream; do
    flag=()
    [ "$mode" = recompute ] && flag=(--no-kv-cache)
    [ "$mode" = stream ] && flag=(--resident-bytes 0)
    t0=$EPOCHREALTIME
    "$STRATA_BIN" sample --checkpoint "$dir/ckpt" --prompt-tokens "10" --tokens "$tokens" \
      --temperature 0 --print-tokens "${flag[@]}" >"$dir/$mode.txt"
    seconds=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }')
    results+=("$mode $seconds")
    echo "sample_kv: repeat $r $mode: $seconds s" >&2
  done
  for other in recompute stream; do
    cmp -s "$dir/cache.txt" "$dir/$other.txt" ||
      { echo "sample_kv: FAILED: $other gave other tokens than cache" >&2; exit 1; }
  done
done
printf '%s\n' "${results[@]}" | python3 -c "
import json, statistics, sys
t = {'cache': [], 'recompute': [], 'stream': []}
for line in sys.stdin:
    mode, s = line.split()
    t[mode].append(float(s))
n = $tokens
cache, recompute = statistics.median(t['cache']), statistics.median(t['recompute'])
stream = statistics.median(t['stream'])
print(json.dumps({'bench': 'sample_kv', 'model': '8 x 512, context 512', 'tokens': n,
                  'repeats': len(t['cache']), 'load_at_start': $bench_load,
                  'cache_s_median': round(cache, 3), 'recompute_s_median': round(recompute, 3),
                  'cache_tokens_per_s': round(n / cache, 1),
                  'recompute_tokens_per_s': round(n / recompute, 1),
                  'stream_s_median': round(stream, 3),
                  'stream_tokens_per_s': round(n / stream, 1),
                  'cache_over_recompute': round(recompute / cache, 2),
                  'cache_over_stream': round(stream / cache, 2)}))
"
