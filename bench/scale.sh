#!/usr/bin/env bash
# State at scale (issue 13), on this machine, in one run:
#   (a) big:    a GPT of >= 3B parameters whose state is >= 2x this machine's RAM trains 3 steps,
#               vertical, bf16, everything on storage (params, optimizer state, gradients,
#               checkpoints, the embedding group's optimizer state); loss finite and falling;
#               peak RSS measured by the OS (getrusage of the child), goal <= 6 GiB.
#   (b) depth:  the same width at a third of the depth, same settings: its peak RSS against (a)'s
#               (host memory must not grow with depth; goal within 10%).
#   (c) resume: a >= 1B model trains 4 steps saving at 2 and 4; a second run resumes from step 2;
#               its losses and its step-4 checkpoint (CRC32C of every file, from the manifests;
#               trainer_state.json field by field but for the run ids)
#               must equal the uninterrupted run's; the resume's and an export's (sharded)
#               peak RSS, goal <= 6 GiB.
#   (d) bf16 vs f32: bench/schedules.sh's model and calibration (rate r = P/c from an
#               unthrottled vertical run), vertical at M=1 (storage-bound), clip on, params and
#               optimizer state on storage behind the limiter, f32 and bf16 alternating 3 times
#               each; median tokens/s (steps after the first). Also with the optimizer state on
#               host (params alone on storage), where bf16 halves every storage byte.
# The last line is one JSON object (fields: see bench/scale_report.py).
#
# It needs free disk for the biggest store (a): the script computes it and refuses with the
# numbers when the directory cannot hold it. Takes ~25 minutes here.
# Env: STRATA_BIN / STRATA_BUILD_DIR (bench/lib.sh), OUT_DIR (default $STRATA_BUILD_DIR/scale_out,
# on the project disk), SCALE_LAYERS (60), SCALE_EMBD (2048), SCALE_STEPS (3).
#   usage: bench/scale.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
out=$(realpath -m "${OUT_DIR:-$build_dir/scale_out}")
layers=${SCALE_LAYERS:-60}
embd=${SCALE_EMBD:-2048}
steps=${SCALE_STEPS:-3}
heads=16 vocab=50257 seq=256
rm -rf "$out" && mkdir -p "$out"
report=(/usr/bin/python3 bench/scale_report.py)

# Free space: the biggest store is (a)'s: 18 B per parameter (bf16 working weights, f32 master,
# m, v and gradient) plus checkpoints; the resume part needs 2 checkpoints of 12 B per parameter
# beside an 18 B/param store of a 1B model. Refuse with the numbers rather than fill the disk.
need=$("${report[@]}" need --layers "$layers" --embd "$embd" --vocab $vocab --seq $seq)
avail=$(df --output=avail -B1 "$out" | tail -1)
if [ "$avail" -lt "$need" ]; then
  echo "scale: $out has $avail bytes free, this benchmark needs $need; free space or set OUT_DIR" >&2
  exit 2
fi
ram=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) * 1024))  # in the shell: awk's %d stops at 2^31

model() {  # layers embd -> model flags
  echo --set model.n_layer="$1" --set model.n_embd="$2" --set model.n_head=$heads \
    --set model.vocab_size=$vocab --set model.context_length=$seq --set train.seq_len=$seq
}
# lr: three steps leave no room for warmup, and Adam's first updates move every weight by ~lr in
# a coherent direction, compounding over depth. Measured at 60 x 2048: lr 3e-4 gives losses
# 11.29, 11.63, 17.55 and 3e-5 gives 11.29, 11.24, 12.13, while 20 x 2048 at 3e-5 descends
# (11.20, 10.62, 9.85); the in-memory trainer overshoots the same way at 4 x 1024 and lr 3e-4
# (10.61, 7.31, 8.24, bit-identical to the vertical schedule on storage). Hence 1e-5.
on_storage=(--set train.schedule=vertical --set train.precision=bf16 --set train.batch_size=1
  --set offload.params_on_host=0 --set offload.optim_on_host=0 --set offload.grads_on_host=0
  --set offload.checkpoints_on_host=0 --set offload.embed_optim_on_host=false
  --set optim.grad_clip=1 --set optim.alpha=1 --set train.grad_accum=2 --set optim.lr=1e-5
  --set optim.warmup_steps=0)

# Runs strata with the arguments given; its peak RSS (the OS's, via getrusage) into $1.rss.
measured() {  # name args...
  local name=$1
  shift
  if ! "${report[@]}" run "$out/$name.rss" "$STRATA_BIN" "$@" >"$out/$name.out" \
    2>"$out/$name.log"; then
    echo "scale: $name failed:" >&2
    tail -5 "$out/$name.log" >&2
    exit 1
  fi
}

store=$out/store
mkdir -p "$store"
echo "scale: (a) $layers x $embd, $steps steps, everything on storage" >&2
measured big train $(model "$layers" "$embd") "${on_storage[@]}" --set train.steps="$steps" \
  --set "io.dirs=[\"$store\"]" --metrics "$out/big.jsonl" --quiet
small_layers=$((layers / 3))
echo "scale: (b) $small_layers x $embd, the same settings" >&2
measured depth train $(model "$small_layers" "$embd") "${on_storage[@]}" \
  --set train.steps="$steps" --set "io.dirs=[\"$store\"]" --metrics "$out/depth.jsonl" --quiet

r_layers=18  # 18 x 2048 + the embedding: 1.01B parameters
echo "scale: (c) $r_layers x $embd: 4 steps saving at 2 and 4, then resumed from 2" >&2
rc=(train $(model $r_layers "$embd") "${on_storage[@]}" --set train.steps=4
  --set "io.dirs=[\"$store\"]" --save-every 2)
measured straight "${rc[@]}" --checkpoint-dir "$out/ckpt_a" --metrics "$out/straight.jsonl" --quiet
cp "$out/ckpt_a/step-00000004/manifest.json" "$out/straight_step4_manifest.json"
cp "$out/ckpt_a/step-00000004/trainer_state.json" "$out/straight_step4_trainer_state.json"
rm -rf "$out/ckpt_a/step-00000004"  # room for the resumed run's
measured resumed "${rc[@]}" --checkpoint-dir "$out/ckpt_b" --resume "$out/ckpt_a/step-00000002" \
  --metrics "$out/resumed.jsonl" --quiet
measured export export --checkpoint "$out/ckpt_b" --out "$out/export/" --shard-size 1GB
cp "$out/ckpt_b/step-00000004/manifest.json" "$out/resumed_step4_manifest.json"
cp "$out/ckpt_b/step-00000004/trainer_state.json" "$out/resumed_step4_trainer_state.json"
ls "$out/export" >"$out/export_files.txt"
rm -rf "$out/ckpt_a" "$out/ckpt_b" "$out/export"

echo "scale: (d) bf16 vs f32, bench/schedules.sh's model behind its calibrated rate" >&2
small=(--set model.n_layer=8 --set model.n_embd=384 --set model.n_head=6 --set model.vocab_size=256
  --set model.context_length=256 --set train.seq_len=256 --set train.batch_size=1
  --set train.schedule=vertical --set optim.grad_clip=1 --set optim.alpha=1 --set train.steps=4
  --set offload.checkpoints_on_host=1 --set offload.grads_on_host=1 --set "io.dirs=[\"$store\"]")
"$STRATA_BIN" train "${small[@]}" --set train.grad_accum=4 --set offload.params_on_host=1 \
  --set offload.optim_on_host=1 --metrics "$out/calib.jsonl" --quiet 2>"$out/calib.log"
read -r rate _ < <(/usr/bin/python3 bench/schedules_report.py rate "$out/calib.jsonl" \
  --layers 8 --embd 384 --micro-batches 4)
for rep in 1 2 3; do
  for prec in f32 bf16; do
    for optim in storage host; do
      of=0
      [ "$optim" = host ] && of=1
      "$STRATA_BIN" train "${small[@]}" --set train.grad_accum=1 --set train.precision=$prec \
        --set offload.params_on_host=0 --set offload.optim_on_host=$of \
        --set io.read_bytes_per_s="$rate" --set io.write_bytes_per_s="$rate" \
        --metrics "$out/d_${prec}_${optim}_$rep.jsonl" --quiet 2>"$out/d_${prec}_${optim}_$rep.log"
    done
  done
done
rm -rf "$store"

"${report[@]}" report "$out" --ram "$ram" --rate "$rate" --layers "$layers" \
  --small-layers "$small_layers" --embd "$embd" --vocab $vocab --seq $seq --load "$bench_load"
