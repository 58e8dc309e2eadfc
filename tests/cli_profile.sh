#!/usr/bin/env bash
# CTest `cli_profile`: `strata profile` end to end on a small model, one round (docs/planner.md):
#  1. the profile it writes loads and predicts (`strata plan --simulate`);
#  2. it has what the cost model reads from a measured profile: a rate table point per
#     micro-batch size, speed-ups of tasks with weights just used (Note [Weights reused]),
#     shared-core paces in (0, 1], a storage cost >= 0 (Note [Shared cores]), and how the
#     measurement went (Note [Robust timings]): one round, timings kept, the machine's load;
#  3. on the discrete CPU device (--set device=cpu-discrete, bf16 weights and GEMMs) it profiles
#     that device: the description names it and the precisions, the device's capacity is the
#     host's (its memory is host memory; the run's budget is not the hardware's), and the
#     compute shares the cores;
#  4. a bad --rounds is a one-line error, exit 2.
# Timings themselves are not checked here (they belong in bench/planner_accuracy.sh).
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/cli_profile"
rm -rf "$work" && mkdir -p "$work/store"
model=(--set model.n_layer=2 --set model.n_embd=64 --set model.n_head=2 --set model.vocab_size=64
       --set model.context_length=32 --set train.seq_len=32)

"$STRATA_BIN" profile --out "$work/hw.json" --dir "$work/store" --io-size 1048576 --rounds 1 \
  "${model[@]}" 2>"$work/profile.log" || { cat "$work/profile.log"; exit 1; }
grep -q "profile: round 1 of 1" "$work/profile.log"
"$STRATA_BIN" plan --profile "$work/hw.json" --simulate --json "${model[@]}" \
  --set train.schedule=vertical --set train.grad_accum=4 --set "io.dirs=[\"$work/store\"]" \
  >"$work/plan.json"
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
p = json.load(open(f"{work}/hw.json"))
c, cores, m = p["compute"], p["cores"], p["measurement"]
tokens = [32, 64, 128]  # B = 1, 2, 4 at T = 32
for k in ("block_fwd", "block_bwd", "head"):
    assert [t for t, _ in c[k]] == tokens, (k, c[k])
    assert all(v > 0 for _, v in c[k]), (k, c[k])
# A speed-up point is left out where the timings make no sense (outside 0.5..2, as on a machine as
# busy as ctest -j makes it), so there may be fewer, or none.
for k in ("block_fwd_reuse", "block_bwd_reuse"):
    assert all(t in tokens and 0.5 <= v <= 2 for t, v in c.get(k, [])), (k, c[k])
assert cores["shared"] is True, cores
for k in ("compute_speed", "optim_speed"):
    assert 0 < cores[k] <= 1, cores
assert cores["io_s_per_byte"] >= 0, cores
assert m["rounds"] == 1 and m["samples"] > 0 and m["rejected"] >= 0, m
assert 0 <= m["other_cpu"] <= 1 and 0 <= m["steal"] <= 1 and m["load_before"] >= 0, m
assert p["sources"]["cores"].startswith("measured by strata profile"), p["sources"]
assert json.load(open(f"{work}/plan.json"))["iter_s"] > 0
PY

# 3. The discrete CPU device, with a device budget (a run setting, not the capacity).
"$STRATA_BIN" profile --out "$work/discrete.json" --dir "$work/store" --io-size 1048576 \
  --rounds 1 --quiet "${model[@]}" --set device=cpu-discrete --set train.precision=bf16 \
  --set train.matmul=bf16 --set memory.device_bytes=50000000 2>"$work/discrete.log" ||
  { cat "$work/discrete.log"; exit 1; }
python3 - "$work/discrete.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
d = p["description"]
assert "cpu-discrete device, weights bf16, GEMMs bf16" in d, d
assert p["capacity"]["device_bytes"] == p["capacity"]["host_bytes"] > 50000000, p["capacity"]
assert p["cores"]["shared"] is True, p["cores"]
PY

# 4. A bad --rounds.
set +e
"$STRATA_BIN" profile --out "$work/bad.json" --rounds 0 2>"$work/bad.log"
rc=$?
set -e
[ "$rc" -eq 2 ] || { echo "--rounds 0: exit $rc, want 2"; exit 1; }
grep -q -- "--rounds must be in 1..100" "$work/bad.log"
[ "$(wc -l <"$work/bad.log")" -eq 1 ]
# 5. A LoRA config is shown with its trainable share (Note [LoRA]) and planned with a read-only
# base (Note [Frozen base]): no gradient or optimizer state for it, a backward without its dW, so
# the prediction is faster than full fine-tuning's on the same profile.
h200="$STRATA_SOURCE_DIR/profiles/h200-141gb-4nvme.json"
"$STRATA_BIN" plan --model llama3-8b --profile "$h200" --set lora.rank=16 >"$work/lora.txt"
grep -q "^lora: rank 16, alpha 16 on 7 of 7 modules per layer: 41.94M trainable parameters (0.52% of 8.07B), the rest frozen; the base is read-only" "$work/lora.txt" ||
  { echo "plan of a LoRA config: $(cat "$work/lora.txt")"; exit 1; }
"$STRATA_BIN" plan --model llama3-8b --profile "$h200" --set lora.rank=16 --json >"$work/lora.json"
"$STRATA_BIN" plan --model llama3-8b --profile "$h200" --json >"$work/full.json"
/usr/bin/python3 - "$work/lora.json" "$work/full.json" <<'PY'
import json, sys
lora, full = (json.load(open(p)) for p in sys.argv[1:3])
assert lora["tokens_per_s"] > 1.1 * full["tokens_per_s"], (lora["tokens_per_s"], full["tokens_per_s"])
PY
echo "cli_profile: ok"
