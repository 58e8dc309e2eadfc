#!/usr/bin/env bash
# The CUDA backend and offloaded training on a machine with a GPU, in under 10 minutes:
#   1. configure and build with CUDA (only what the checks need);
#   2. per-op parity, CUDA against CPU (tests/test_cuda_backend.cpp: NMSE <= 1e-5 for every op
#      and gradient in f32 and for the bf16 GEMM, AdamW bit for bit, streams, events, pool;
#      NCCL's all-reduce on a world of one, every piece sent through itself, bit for bit);
#   3. GEMM throughput on the GPT-2 shapes: Strata's bf16 path against the fastest of cuBLASLt's
#      top heuristic candidates (bench/bench_cuda_gemm.cpp), and a measured bf16 peak;
#   4. `strata profile` of this machine for the run's model (device tasks timed one by one:
#      OffloadTrainer::set_time_device_tasks); after the runs, `strata plan --simulate` of the
#      horizontal and vertical runs from it: the simulator's prediction;
#   5. training on the GPU (--device cuda, bf16 weights and GEMMs, f32 master and moments): the
#      in-memory schedule (device AdamW, everything on the GPU: the reference), then the
#      horizontal and vertical schedules with params and optimizer state on the local disk and a
#      device budget (memory.device_bytes) below the state's size, block AdamW on the host CPU;
#      Then the vertical run again with LoRA (rank 16, all linear layers, the bf16 base frozen);
#   6. one JSON line: parity, GEMM, per run the medians over the steps after the first of
#      tokens/s, model FLOP/s and MFU (against the measured bf16 peak), the busy time per
#      resource, the predictions, and vertical over horizontal.
# Under event ordering a device task's span in the metrics is the host's time to issue it, not
# the GPU's time to run it (Note [Ordering by events]): the device rows of
# busy_s are issue times; the profile's device timings are synchronous and so real.
#
#   scripts/gpu-check.sh
# Env: STRATA_GPU_BUILD_DIR (build-gpu), STRATA_GPU_STORE (where the state goes; default under
# the build directory: a local disk), the model and run: STRATA_GPU_LAYERS (24), STRATA_GPU_EMBD
# (1024), STRATA_GPU_HEADS (16), STRATA_GPU_VOCAB (50304), STRATA_GPU_SEQ (1024),
# STRATA_GPU_BATCH (micro-batch size, 8), STRATA_GPU_MICRO (micro-batches per step, 8),
# STRATA_GPU_STEPS (4), STRATA_GPU_DEVICE_BYTES (the offloaded runs' device budget, 4 GiB).
# STRATA_GPU_CHECK_DRY_RUN=1: no CUDA; the plumbing of stages 4-6 on the discrete CPU device
# (--device cpu-discrete) with a tiny model, for testing this script on a machine without a GPU.
# Exit status: 0 when the build, every parity test and every training run passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

dry=${STRATA_GPU_CHECK_DRY_RUN:-0}
build_dir=${STRATA_GPU_BUILD_DIR:-build-gpu}
log_dir="$build_dir/gpu-check"
start=$(date +%s)
budget_s=570  # the whole script; each training stage gets at most what is left
elapsed() { echo $(($(date +%s) - start)); }
left() { echo $((budget_s - $(elapsed))); }
json_escape() { sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' | tr '\n' ' '; }

gpu_name=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
  head -1 | json_escape)
echo "gpu-check: ${gpu_name:-no nvidia-smi}"

fail() {  # fail STAGE MESSAGE: the final JSON line, then exit 1
  printf '{"gpu_check": "failed", "stage": "%s", "error": "%s", "gpu": "%s", "elapsed_s": %s}\n' \
    "$1" "$(echo "$2" | json_escape)" "$gpu_name" "$(elapsed)"
  exit 1
}

if [ "$dry" = 1 ]; then
  device=cpu-discrete cuda_flags=() targets=(strata)
  : "${STRATA_GPU_LAYERS:=2}" "${STRATA_GPU_EMBD:=64}" "${STRATA_GPU_HEADS:=2}"
  : "${STRATA_GPU_VOCAB:=256}" "${STRATA_GPU_SEQ:=64}" "${STRATA_GPU_BATCH:=2}"
  : "${STRATA_GPU_MICRO:=2}" "${STRATA_GPU_STEPS:=3}" "${STRATA_GPU_DEVICE_BYTES:=8000000}"
else
  device=cuda cuda_flags=(-DSTRATA_CUDA=ON) targets=(test_cuda_backend bench_cuda_gemm strata)
fi
layers=${STRATA_GPU_LAYERS:-24} embd=${STRATA_GPU_EMBD:-1024} heads=${STRATA_GPU_HEADS:-16}
vocab=${STRATA_GPU_VOCAB:-50304} seq=${STRATA_GPU_SEQ:-1024} batch=${STRATA_GPU_BATCH:-8}
micro=${STRATA_GPU_MICRO:-8} steps=${STRATA_GPU_STEPS:-4}
device_bytes=${STRATA_GPU_DEVICE_BYTES:-$((4 << 30))}

# ---- 1. build -----------------------------------------------------------------------------------
mkdir -p "$log_dir"
source scripts/jobs.sh
echo "gpu-check: building in $build_dir ($jobs jobs)"
if ! timeout 90 cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  "${cuda_flags[@]}" >"$log_dir/configure.log" 2>&1; then
  tail -20 "$log_dir/configure.log"
  fail configure "cmake failed (log: $log_dir/configure.log)"
fi
if ! timeout 240 cmake --build "$build_dir" -j "$jobs" --target "${targets[@]}" \
  >"$log_dir/build.log" 2>&1; then
  tail -30 "$log_dir/build.log"
  fail build "build failed (log: $log_dir/build.log)"
fi
strata="$build_dir/strata"
echo "gpu-check: built in $(elapsed) s"

# ---- 2. parity ----------------------------------------------------------------------------------
passed=0 failed=0 skipped=0
if [ "$dry" != 1 ]; then
  echo "gpu-check: per-op parity (test_cuda_backend)"
  timeout 90 "$build_dir/tests/test_cuda_backend" 2>&1 | tee "$log_dir/parity.log"
  parity_rc=${PIPESTATUS[0]}
  count() { grep -oE "^\[  $1 *\] [0-9]+ test" "$log_dir/parity.log" | grep -oE '[0-9]+' | head -1; }
  passed=$(count PASSED)
  failed=$(count FAILED)
  skipped=$(count SKIPPED)
  passed=${passed:-0} failed=${failed:-0} skipped=${skipped:-0}
  if [ "$parity_rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi  # crashed or timed out
  if [ "$skipped" -gt 0 ] && [ "$passed" -eq 0 ]; then
    fail parity "every parity test skipped: $(grep -m1 'unavailable' "$log_dir/parity.log")"
  fi
fi

# ---- 3. GEMM throughput -------------------------------------------------------------------------
gemm_json='{"dry_run": true}'
if [ "$dry" != 1 ]; then
  echo "gpu-check: GEMM throughput (bench_cuda_gemm)"
  timeout 75 "$build_dir/bench/bench_cuda_gemm" 2>&1 | tee "$log_dir/gemm.log"
  gemm_json=$(tail -1 "$log_dir/gemm.log")
fi
case "$gemm_json" in
  \{*\}) ;;
  *) gemm_json="{\"error\": \"bench_cuda_gemm gave no JSON line\"}" ;;
esac
peak_tflops=$(echo "$gemm_json" | grep -oE '"measured_peak_tflops": [0-9.]+' | grep -oE '[0-9.]+$')

# ---- 4. profile and prediction ------------------------------------------------------------------
store=${STRATA_GPU_STORE:-$log_dir/store}
rm -rf "$store" && mkdir -p "$store"
trap 'rm -rf "$store"' EXIT
# The state on storage: bf16 working weights (2 B/param) and f32 master, m, v (12 B/param).
params=$((12 * layers * embd * embd + (vocab + seq) * embd))
state_bytes=$((14 * params))
free_bytes=$(($(df -Pk "$store" | awk 'NR == 2 {print $4}') * 1024))
if [ "$free_bytes" -lt $((state_bytes + state_bytes / 4)) ]; then
  fail disk "the run's state needs $state_bytes bytes (+25%) on $store, which has $free_bytes free"
fi

model=(--set "model.n_layer=$layers" --set "model.n_embd=$embd" --set "model.n_head=$heads"
  --set "model.vocab_size=$vocab" --set "model.context_length=$seq" --set "train.seq_len=$seq"
  --set train.precision=bf16 --set train.matmul=bf16)
run_flags=("${model[@]}" --set "train.batch_size=$batch" --set "train.grad_accum=$micro"
  --set "train.steps=$steps" --set optim.grad_clip=0)
offload=(--set "io.dirs=[\"$store\"]" --set "memory.device_bytes=$device_bytes"
  --set offload.params_on_host=0 --set offload.optim_on_host=0
  --set offload.checkpoints_on_host=1 --set offload.grads_on_host=1)

profile="$log_dir/profile.json"
echo "gpu-check: strata profile ($(left) s left)"
if ! timeout $(($(left) > 120 ? 120 : $(left))) "$strata" profile --out "$profile" --dir "$store" \
  --rounds 1 --quiet --set "device=$device" "${model[@]}" >"$log_dir/profile.log" 2>&1; then
  tail -5 "$log_dir/profile.log"
  profile=
fi

predict() {  # predict SCHEDULE ALPHA: `strata plan --simulate --json` of that run, or an error
  local out="$log_dir/plan_$1.json"
  if [ -z "$profile" ]; then
    echo '{"error": "no profile (strata profile failed or timed out)"}'
  elif timeout 60 "$strata" plan --profile "$profile" --simulate --json "${run_flags[@]}" \
    "${offload[@]}" --set "train.schedule=$1" --set "optim.alpha=$2" >"$out" 2>"$out.log"; then
    /usr/bin/env python3 - "$out" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
print(json.dumps({k: p[k] for k in ("iter_s", "tokens_per_s", "model_flops_per_s", "bound",
                                     "busy_s")}))
EOF
  else
    printf '{"error": "%s"}\n' "$(tail -1 "$out.log" | json_escape)"
  fi
}
# ---- 5. training --------------------------------------------------------------------------------
runs_ok=1
train() {  # train NAME [flags...]: $log_dir/NAME.jsonl and .log; the summary object on stdout
  local name=$1 t
  shift
  t=$(left)
  if [ "$t" -lt 20 ]; then
    echo '{"error": "not run: the 10-minute budget is spent"}'
    runs_ok=0
    return
  fi
  echo "gpu-check: train $name ($t s left)" >&2
  rm -f "$log_dir/$name.jsonl"
  if ! timeout "$t" "$strata" train --device "$device" "${run_flags[@]}" "$@" \
    --metrics "$log_dir/$name.jsonl" --quiet >"$log_dir/$name.log" 2>&1; then
    tail -3 "$log_dir/$name.log" >&2
    printf '{"error": "%s"}\n' "$(tail -1 "$log_dir/$name.log" | json_escape)"
    runs_ok=0
    return
  fi
  /usr/bin/env python3 - "$log_dir/$name.jsonl" "${peak_tflops:-0}" <<'EOF'
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
peak = float(sys.argv[2]) * 1e12
steady = lines[1:] or lines  # the first step warms up (and has no pending optimizer steps)
med = lambda k: statistics.median(l[k] for l in steady)
out = {"steps": len(lines), "tokens_per_s": med("tokens_per_s"), "iter_s": med("iter_s"),
       "model_flops_per_s": med("model_flops_per_s"),
       "mfu": med("model_flops_per_s") / peak if peak > 0 else None,
       "loss_first": lines[0]["loss"], "loss_last": lines[-1]["loss"],
       "peak_device_bytes": lines[-1]["peak_device_bytes"]}
if "busy_s" in lines[-1]:
    out["busy_s"] = {r: statistics.median(l["busy_s"][r] for l in steady)
                     for r in lines[-1]["busy_s"]}
    out["planned_device_bytes"] = lines[-1]["planned_device_bytes"]
print(json.dumps(out))
EOF
}
in_memory=$(train in_memory --set train.schedule=in_memory)
horizontal=$(train horizontal --set train.schedule=horizontal "${offload[@]}")
vertical_flags=(--set train.schedule=vertical "${offload[@]}")
[ -n "$profile" ] && vertical_flags+=(--profile "$profile")  # optim.alpha auto: simulated
vertical=$(train vertical "${vertical_flags[@]}")
# LoRA (Note [LoRA]): rank 16 on every linear layer over the frozen bf16 base, same placement.
lora=$(train lora_vertical "${vertical_flags[@]}" --set lora.rank=16 --set lora.base_precision=bf16)
alpha=$(sed -n 's/.*optim.alpha auto: \([0-9.]*\).*/\1/p' "$log_dir/vertical.log" | head -1)
# The simulator's prediction of the same runs (the vertical one at the alpha it took).
predicted_h=$(predict horizontal 1)
predicted_v=$(predict vertical "${alpha:-1}")

# ---- 6. figures ---------------------------------------------------------------------------------
ratio=$(/usr/bin/env python3 -c '
import json, sys
h, v = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(v["tokens_per_s"] / h["tokens_per_s"] if "tokens_per_s" in h and "tokens_per_s" in v
      else "null")' "$horizontal" "$vertical" 2>/dev/null)
status=passed
[ "$failed" -eq 0 ] && [ "$runs_ok" = 1 ] || status=failed
printf '{"gpu_check": "%s", "gpu": "%s", "dry_run": %s, "elapsed_s": %s, "parity": {"passed": %s, "failed": %s, "skipped": %s}, "gemm": %s, "model": {"layers": %s, "embd": %s, "vocab": %s, "seq": %s, "params": %s, "state_bytes": %s, "device_bytes": %s, "micro_batch": %s, "micro_batches": %s}, "runs": {"in_memory": %s, "horizontal": %s, "vertical": %s, "lora_vertical": %s}, "vertical_alpha": %s, "vertical_over_horizontal": %s, "predicted": {"horizontal": %s, "vertical": %s}, "busy_s_note": "device rows of the runs are issue times under event ordering"}\n' \
  "$status" "$gpu_name" "$([ "$dry" = 1 ] && echo true || echo false)" "$(elapsed)" \
  "$passed" "$failed" "$skipped" "$gemm_json" "$layers" "$embd" "$vocab" "$seq" "$params" \
  "$state_bytes" "$device_bytes" "$batch" "$micro" "$in_memory" "$horizontal" "$vertical" "$lora" \
  "${alpha:-null}" "${ratio:-null}" "$predicted_h" "$predicted_v"
[ "$status" = passed ]
