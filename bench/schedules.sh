#!/usr/bin/env bash
# The horizontal (ZeRO-Infinity order) and vertical (GreedySnake) schedules against each other, in
# one run, with parameters and optimizer state on storage behind the rate limiter.
#   model: GPT, 8 blocks x C=384 (6 heads), vocab 256, T=256: 14.4M parameters, f32 on the CPU;
#          micro-batch B=1 x T=256, M in {1, 2, 4, 8, 16} micro-batches (256..4096 tokens/iter).
#   placement: params and optimizer state on storage (io.dirs), block-input checkpoints on host.
#   runs per M, back to back: horizontal (clip off); vertical (clip off, alpha chosen per M by
#          the trainer, below); vertical_clip (clip on at alpha 1: every optimizer step waits for
#          the norm, its I/O deferred whole to the next forward: exact clipping before
#          speculation); vertical_spec (clip on at a threshold no step reaches, alpha chosen, the
#          backward part of each step speculative: Note [Speculative steps]); vertical_always
#          (clip on at a threshold every step exceeds, alpha chosen, speculation "auto": it
#          repairs step 0, then waits for the norm).
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
# Alpha (the part of each block's optimizer step run in the next forward) is the trainer's own
# choice (optim.alpha "auto"): `strata profile` measures this machine once, and each vertical run
# gets --profile, so the planner simulates the run's own plans (at the run's rate limits) for
# each alpha and takes the fastest (docs/design.md §5.7). The choice is read back from the run's
# log into the table.
#
# The cost of clipping: clip_spec_cost = vertical / vertical_spec tokens/s (clipping that never
# triggers, with speculation; goal <= 1.03) and clip_always_cost = vertical_clip /
# vertical_always tokens/s (clipping in every step: the speculation policy against alpha 1;
# goal <= 1.03); clip_on_cost (vertical / vertical_clip) is what exact clipping cost before.
#
# Env overrides: STRATA_BIN (default: build it, then $STRATA_BUILD_DIR/strata), OUT_DIR (report,
# runs, trace; default $STRATA_BUILD_DIR/bench_out), STRATA_BENCH_STORE (where the store file
# goes; default under OUT_DIR; a real disk is best, tmpfs works since the limiter sets the pace),
# STRATA_BENCH_STEPS (4), STRATA_BENCH_MS ("1 2 4 8 16"), STRATA_BENCH_LAYERS (8),
# STRATA_BENCH_RATE (bytes/s; skips the calibration), STRATA_BENCH_ALPHA (auto: the trainer's
# choice from the profile; or a number for every M), STRATA_BENCH_PROFILE (a profile to use
# instead of measuring one).
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

model=(--set "model.n_layer=$layers" --set "model.n_embd=$embd" --set "model.n_head=$heads"
  --set "model.vocab_size=$vocab" --set "model.context_length=$seq" --set "train.seq_len=$seq"
  --set "train.batch_size=$batch")
common=("${model[@]}" --set "train.steps=$steps" --set "io.dirs=[\"$store\"]"
  --set offload.params_on_host=0 --set offload.optim_on_host=0
  --set offload.checkpoints_on_host=1 --set offload.grads_on_host=1)
declare -A flags=(
  [horizontal]="--set train.schedule=horizontal --set optim.grad_clip=0"
  [vertical]="--set train.schedule=vertical --set optim.grad_clip=0"
  [vertical_clip]="--set train.schedule=vertical --set optim.grad_clip=1 --set optim.alpha=1"
  [vertical_spec]="--set train.schedule=vertical --set optim.grad_clip=1e6"
  [vertical_always]="--set train.schedule=vertical --set optim.grad_clip=1e-6")

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
  echo "schedules: rate $rate B/s from STRATA_BENCH_RATE (no calibration)" >&2
else
  echo "schedules: calibrating c (unthrottled vertical, M=$calib_m)" >&2
  run vertical_calib $calib_m 0
  read -r rate calib_c < <("${report[@]}" rate "$runs/vertical_calib_M$calib_m.jsonl" \
    --layers "$layers" --embd $embd --micro-batches $calib_m)
fi

# The alpha of the runs that choose it: the trainer's, from a profile of this machine.
alpha_flags=(--set "optim.alpha=$alpha")
if [ "$alpha" = auto ]; then
  prof=${STRATA_BENCH_PROFILE:-$out/profile.json}
  if [ -z "${STRATA_BENCH_PROFILE:-}" ]; then
    echo "schedules: strata profile (for the trainer's choice of alpha)" >&2
    "$STRATA_BIN" profile --out "$prof" --dir "$store" --quiet "${model[@]}" \
      >"$runs/profile.log" 2>&1 || { cat "$runs/profile.log" >&2; exit 1; }
  fi
  alpha_flags=(--profile "$prof")
fi

i=0
runs_per_m=(horizontal vertical vertical_clip vertical_spec vertical_always)
for m in $ms; do
  # Rotate which schedule goes first so that a slow spell on the machine does not always land
  # on the same one.
  order=("${runs_per_m[@]:i%5}" "${runs_per_m[@]:0:i%5}")
  for name in "${order[@]}"; do
    echo "schedules: M=$m $name" >&2
    extra=()
    [[ $name == vertical || $name == vertical_spec || $name == vertical_always ]] &&
      extra=("${alpha_flags[@]}")
    [ "$name" = vertical ] && [ "$m" = "$trace_m" ] && extra+=(--trace "$out/vertical_trace.json")
    run "$name" "$m" "$rate" "${extra[@]}"
  done
  # The alpha the vertical run took (logged by the trainer), or the fixed one.
  a=$alpha
  [ "$alpha" = auto ] &&
    a=$(sed -n 's/.*optim.alpha auto: \([0-9.]*\).*/\1/p' "$runs/vertical_M$m.log" | head -1)
  echo "${a:-1}" >"$runs/alpha_M$m"
  i=$((i + 1))
done

trace_args=()
[ -f "$out/vertical_trace.json" ] && [[ " $ms " == *" $trace_m "* ]] &&
  trace_args=(--trace "$out/vertical_trace.json")
"${report[@]}" report "$runs" --rate "$rate" --layers "$layers" --embd $embd --vocab $vocab \
  --seq $seq --batch $batch --alpha "$alpha" --ms "$ms" ${calib_c:+--calib-c "$calib_c"} \
  "${trace_args[@]}" --wall-s $((SECONDS - start_s)) | tee "$out/report.txt"
