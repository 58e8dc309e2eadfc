#!/usr/bin/env bash
# LoRA over a frozen base streamed from storage (issue 39, Note [Frozen base] in
# src/sched/schedule_spec.h), on this machine, in one run:
#   (a) same:  bench/scale.sh's GPT (60 x 2048, 3.12B), vertical, bf16, everything on storage
#              (the embed group's state too), M = 2, B = 1, T = 256: LoRA r = 16 on every linear
#              layer, then full fine-tuning of the same model with the same micro-batches; storage
#              bytes read and written per step per base parameter (medians of the steps after the
#              first), peak RSS (getrusage of the child), tokens/s of both and their ratio,
#              over_roofline of the LoRA run.
#   (b) big:   a GPT whose bf16 base is >= 1.3x this machine's RAM (82 x 4096, 16.7B) fine-tunes
#              with LoRA for 2 steps, T = 64, the base read from storage: loss finite and falling,
#              peak RSS.
#   (c) planner: `strata profile` of this machine, then `strata plan --simulate` of (a)'s two runs
#              and (b): the predicted iteration time against the measured median.
#   (d) predictions: tokens/s of Llama 3 70B with LoRA (r 16, all linear) against full
#              fine-tuning on the A100 and H200 profiles in profiles/ (planner search).
# The last line is one JSON object (fields: bench/lora_report.py). Not measured: an NF4 base
# (not built yet), so read_bytes_per_base_param_nf4 is null.
# It needs free disk for the biggest store, (a)'s full fine-tuning (18 B per parameter) or (b)'s
# base (2 B per parameter): it computes both and refuses with the numbers when the directory
# cannot hold them. Takes about an hour here.
# Env: STRATA_BIN / STRATA_BUILD_DIR (bench/lib.sh), OUT_DIR (default $STRATA_BUILD_DIR/lora_out),
# LORA_LAYERS (60), LORA_EMBD (2048), LORA_STEPS (3), BIG_LAYERS (82), BIG_EMBD (4096).
#   usage: bench/lora.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
out=$(realpath -m "${OUT_DIR:-$build_dir/lora_out}")
layers=${LORA_LAYERS:-60}
embd=${LORA_EMBD:-2048}
steps=${LORA_STEPS:-3}
big_layers=${BIG_LAYERS:-82}
big_embd=${BIG_EMBD:-4096}
vocab=50257 seq=256 big_seq=64
rm -rf "$out" && mkdir -p "$out"
report=(/usr/bin/python3 bench/lora_report.py)
ram=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) * 1024))

need=$("${report[@]}" need --layers "$layers" --embd "$embd" --big-layers "$big_layers" \
  --big-embd "$big_embd" --vocab $vocab --seq $seq)
avail=$(df --output=avail -B1 "$out" | tail -1)
if [ "$avail" -lt "$need" ]; then
  echo "lora: $out has $avail bytes free, this benchmark needs $need; free space or set OUT_DIR" >&2
  exit 2
fi

model() {  # layers embd heads seq -> model flags
  echo --set model.n_layer="$1" --set model.n_embd="$2" --set model.n_head="$3" \
    --set model.vocab_size=$vocab --set model.context_length="$4" --set train.seq_len="$4"
}
store=$out/store
on_storage=(--set train.schedule=vertical --set train.precision=bf16 --set train.batch_size=1
  --set offload.params_on_host=0 --set offload.optim_on_host=0 --set offload.grads_on_host=0
  --set offload.checkpoints_on_host=0 --set offload.embed_optim_on_host=false
  --set optim.grad_clip=1 --set optim.alpha=1 --set optim.warmup_steps=0
  --set "io.dirs=[\"$store\"]")
lora=(--set lora.rank=16 --set lora.alpha=16 --set 'lora.targets=["all-linear"]')

# Runs strata with the arguments given: its peak RSS (the OS's, via getrusage) into $name.rss,
# its output and log beside it.
measured() {  # name args...
  local name=$1
  shift
  mkdir -p "$store"
  if ! "${report[@]}" run "$out/$name.rss" "$STRATA_BIN" "$@" >"$out/$name.out" \
    2>"$out/$name.log"; then
    echo "lora: $name failed:" >&2
    tail -5 "$out/$name.log" >&2
    exit 1
  fi
  rm -rf "$store"
}

a_flags=($(model "$layers" "$embd" 16 $seq) "${on_storage[@]}" --set train.grad_accum=2
  --set train.steps="$steps" --set optim.lr=1e-4)
echo "lora: (a) $layers x $embd, LoRA r 16 then full fine-tuning, $steps steps each" >&2
measured a_lora train "${a_flags[@]}" "${lora[@]}" --metrics "$out/a_lora.jsonl" --quiet
measured a_full train "${a_flags[@]}" --set optim.lr=1e-5 --metrics "$out/a_full.jsonl" --quiet

b_flags=($(model "$big_layers" "$big_embd" 32 $big_seq) "${on_storage[@]}" --set train.grad_accum=1
  --set train.steps=2 --set optim.lr=1e-4)
echo "lora: (b) $big_layers x $big_embd with LoRA, 2 steps, the base on storage" >&2
measured b_lora train "${b_flags[@]}" "${lora[@]}" --metrics "$out/b_lora.jsonl" --quiet

echo "lora: (c) the planner's predictions from a profile of this machine" >&2
"$STRATA_BIN" profile --out "$out/hw.json" 2>"$out/profile.log"
"$STRATA_BIN" plan --simulate --json --profile "$out/hw.json" "${a_flags[@]}" "${lora[@]}" \
  >"$out/plan_a_lora.json"
"$STRATA_BIN" plan --simulate --json --profile "$out/hw.json" "${a_flags[@]}" >"$out/plan_a_full.json"
"$STRATA_BIN" plan --simulate --json --profile "$out/hw.json" "${b_flags[@]}" "${lora[@]}" \
  >"$out/plan_b_lora.json"

echo "lora: (d) Llama 3 70B on the A100 and H200 profiles" >&2
for prof in a100-80gb-4nvme h200-141gb-4nvme; do
  "$STRATA_BIN" plan --json --model llama3-70b --profile "profiles/$prof.json" "${lora[@]}" \
    >"$out/plan_70b_lora_$prof.json"
  "$STRATA_BIN" plan --json --model llama3-70b --profile "profiles/$prof.json" \
    >"$out/plan_70b_full_$prof.json"
done

"${report[@]}" report "$out" --ram "$ram" --layers "$layers" --embd "$embd" \
  --big-layers "$big_layers" --big-embd "$big_embd" --vocab $vocab --seq $seq \
  --big-seq $big_seq --load "$bench_load"
