#!/usr/bin/env bash
# The horizontal (ZeRO-Infinity order) and vertical (GreedySnake) schedules against each other, in
# one run, with parameters and optimizer state on storage behind the rate limiter.
#   model: GPT, 8 blocks x C=384 (6 heads), vocab 256, T=256: 14.4M parameters, f32 on the CPU;
#          micro-batch B=1 x T=256, M in {1, 2, 4, 8, 16} micro-batches (256..4096 tokens/iter).
#   placement: params and optimizer state on storage (io.dirs), block-input checkpoints on host.
#   runs per M, back to back: horizontal (clip off), vertical (clip off, alpha chosen per M,
#          below) and vertical_clip (clip on, so alpha 1: every optimizer step exact, its I/O deferred
#          whole to the next forward) — the cost of exact clipping on this schedule.
# Per run, figures are medians over the steps after step 0 (warm-up; vertical's first iteration
# also has no pending optimizer steps). The report puts tokens/s, iteration time and the
# roofline ideal (the busiest resource's busy time; compute and cpu_optim counted as one, since
# they share the cores) side by side, summarises a trace of one vertical iteration, and ends with
# one JSON line holding min_vertical_over_horizontal_storage_bound and
# max_vertical_over_roofline.
#
# The rate. Let P be one block's f32 parameter bytes (optimizer state is 3P: master, m, v) and c
# the compute time of one micro-batch through one block (forward, recompute, backward). Per block
# and iteration, storage moves:
#   horizontal: reads (2M+3)P (params for each micro-batch's forward and backward, state once),
#               writes 4P (state, params);
#   vertical:   reads (5-alpha)P (forward P(1+2alpha), backward P(4-3alpha)), writes 4P; the
#               snake keeps a block's params on the device for all M micro-batches.
# Against M c of compute. One rate r for both directions with x = P/(r c) = 1 puts horizontal's
# read time (2M+3)c above its compute Mc at every M (storage-bound throughout, by ~2x for large
# M), while vertical's 4.5c of reads balances compute at M ~ 4.5 and is compute-bound beyond:
# the crossover sits inside the sweep, at ~1.1k tokens, and M=16 is 4k tokens. c is measured
# here first (an unthrottled vertical run) rather than hard-coded, since it depends on the CPU;
# r = P/c, rounded to a whole MB/s.
#
# Alpha (the part of each block's optimizer step run in the next forward). Even bytes are not
# even time: the forward holds about a quarter of the compute (the backward also recomputes), so
# near the crossover alpha 0.5 leaves the forward storage-bound and the backward compute-bound.
# Per M the script picks the alpha with the least predicted time of a two-phase model (within a
# phase compute, reads and writes overlap; the phases add: schedules_report.py phase_time), as
# GreedySnake's LP does; x = 1 gives 0.5 at M = 1, 2 and 8, 0.35 at M = 4, 1 at M = 16.
#
# Env overrides: STRATA_BIN (default: build it, then $STRATA_BUILD_DIR/strata), OUT_DIR (report,
# runs, trace; default $STRATA_BUILD_DIR/bench_out), STRATA_BENCH_STORE (where the store file
# goes; default under OUT_DIR; a real disk is best, tmpfs works since the limiter sets the pace),
# STRATA_BENCH_STEPS (4), STRATA_BENCH_MS ("1 2 4 8 16"), STRATA_BENCH_LAYERS (8),
# STRATA_BENCH_RATE (bytes/s; skips the calibration), STRATA_BENCH_ALPHA (auto: per M; or a
# number for every M; with STRATA_BENCH_RATE and no number, 0.5).
#   usage: bench/schedules.sh
set -euo pipefail
cd "$(dirname "$0")/.."
start_s=$SECONDS
source bench/lib.sh
out=${OUT_DIR:-$build_dir/bench_out}
steps=${STRATA_BENCH_STEPS:-4}
ms=${STRATA_BENCH_MS:-1 2 4 8 16}
layers=${STRATA_BENCH_LAYERS:-8}
alpha=${STRATA_BENCH_ALPHA:-auto}
embd=384 heads=6 vocab=256 seq=256 batch=1
calib_m=4  # the calibration's M: per-micro-batch cost at the crossover, fixed overheads spread
trace_m=4  # the main vertical configuration: near its storage/compute balance
runs=$out/runs
mkdir -p "$out" "${STRATA_BENCH_STORE:-$out}"
rm -rf "$runs" "$out/vertical_trace.json" && mkdir -p "$runs"
store=$(mktemp -d "${STRATA_BENCH_STORE:-$out}/store.XXXXXX")
trap 'rm -rf "$store"' EXIT
report=(/usr/bin/python3 bench/schedules_report.py)

common=(--set "model.n_layer=$layers" --set "model.n_embd=$embd" --set "model.n_head=$heads"
  --set "model.vocab_size=$vocab" --set "model.context_length=$seq" --set "train.seq_len=$seq"
  --set "train.batch_size=$batch" --set "train.steps=$steps" --set "io.dirs=[\"$store\"]"
  --set offload.params_on_host=0 --set offload.optim_on_host=0
  --set offload.checkpoints_on_host=1 --set offload.grads_on_host=1)
declare -A flags=(
  [horizontal]="--set train.schedule=horizontal --set optim.grad_clip=0"
  [vertical]="--set train.schedule=vertical --set optim.grad_clip=0"
  [vertical_clip]="--set train.schedule=vertical --set optim.grad_clip=1 --set optim.alpha=1")

block_bytes() {  # one block's f32 params: 12C^2 weights + 13C biases and norms
  echo $((4 * (12 * embd * embd + 13 * embd)))
}

run() {  # name M rate [extra flags...] -> $runs/<name>_M<M>.jsonl (and .log)
  local name=$1 m=$2 rate=$3
  shift 3
  local base=$runs/${name}_M$m
  # shellcheck disable=SC2086  # the flags are words on purpose
  if ! "$STRATA_BIN" train "${common[@]}" ${flags[${name%_calib}]} --set train.grad_accum="$m" \
    --set io.read_bytes_per_s="$rate" --set io.write_bytes_per_s="$rate" \
    --metrics "$base.jsonl" --quiet "$@" 2>"$base.log"; then
    echo "schedules: $name M=$m failed:" >&2
    cat "$base.log" >&2
    exit 1
  fi
}

if [ -n "${STRATA_BENCH_RATE:-}" ]; then
  rate=$STRATA_BENCH_RATE calib_c=
  [ "$alpha" = auto ] && alpha=0.5  # the per-M choice needs the calibrated compute time
  echo "schedules: rate $rate B/s from STRATA_BENCH_RATE (no calibration)" >&2
else
  echo "schedules: calibrating c (unthrottled vertical, M=$calib_m)" >&2
  run vertical_calib $calib_m 0
  read -r rate calib_c < <("${report[@]}" rate "$runs/vertical_calib_M$calib_m.jsonl" \
    --layers "$layers" --embd $embd --micro-batches $calib_m)
fi

i=0
for m in $ms; do
  # Rotate which schedule goes first so that a slow spell on the machine does not always land
  # on the same one.
  order=(horizontal vertical vertical_clip)
  order=("${order[@]:i%3}" "${order[@]:0:i%3}")
  # Vertical's alpha: per M, the least predicted time of the phase model (schedules_report.py
  # phase_time) for x = P/(r c), or the fixed STRATA_BENCH_ALPHA.
  a=$alpha
  if [ "$alpha" = auto ]; then
    x=$(/usr/bin/python3 -c "print($(block_bytes) / ($rate * $calib_c))")
    a=$("${report[@]}" alpha --m "$m" --x "$x")
  fi
  echo "$a" >"$runs/alpha_M$m"
  for name in "${order[@]}"; do
    echo "schedules: M=$m $name" >&2
    extra=()
    [ "$name" = vertical ] && extra=(--set "optim.alpha=$a")
    [ "$name" = vertical ] && [ "$m" = "$trace_m" ] && extra+=(--trace "$out/vertical_trace.json")
    run "$name" "$m" "$rate" "${extra[@]}"
  done
  i=$((i + 1))
done

trace_args=()
[ -f "$out/vertical_trace.json" ] && [[ " $ms " == *" $trace_m "* ]] &&
  trace_args=(--trace "$out/vertical_trace.json")
"${report[@]}" report "$runs" --rate "$rate" --layers "$layers" --embd $embd --vocab $vocab \
  --seq $seq --batch $batch --alpha "$alpha" --ms "$ms" ${calib_c:+--calib-c "$calib_c"} \
  "${trace_args[@]}" --wall-s $((SECONDS - start_s)) | tee "$out/report.txt"
