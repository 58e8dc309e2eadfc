#!/usr/bin/env bash
# CTest `finetune_llama_lora`: LoRA on an imported model, as a user runs it. A random-weight
# Hugging Face Llama (GQA, untied head, bf16 weights in 2 shards; tools/make_hf_fixture.py) is
# imported with --init-from and fine-tuned with rank-8 adapters on every linear layer (Note
# [LoRA] in src/model/lora.h), vertically, every state tensor on storage, in bf16. Checked:
# the loss falls; every base tensor of the step-8 checkpoint is the imported weight, bit for bit
# (the base is frozen); every adapter B moved off zero; resumed from step 4, the step-8
# checkpoint is byte-identical, with --resume alone (a --set against its model: one line, exit 2).
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_SOURCE_DIR:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/finetune_llama_lora"
rm -rf "$work" && mkdir -p "$work/store"
fail() { echo "finetune_llama_lora: FAILED: $*" >&2; exit 1; }
/usr/bin/python3 -c "import torch" 2>/dev/null ||
  fail "needs Debian's python3-torch (/usr/bin/python3)"

/usr/bin/python3 "$STRATA_SOURCE_DIR/tools/make_hf_fixture.py" "$work/base" --arch llama \
  --dtype bf16 --shards 2 --layers 2 --embd 64 --heads 4 --kv-heads 2 --ffn 96 --vocab 256 \
  --ctx 64 --untied

steps=8
run=(--set train.schedule=vertical --set train.steps=$steps --set train.seq_len=64
     --set train.batch_size=4 --set train.grad_accum=2 --set optim.lr=1e-2
     --set optim.warmup_steps=2 --set train.precision=bf16 --set "io.dirs=[\"$work/store\"]"
     --set offload.params_on_host=0 --set offload.optim_on_host=0
     --set offload.grads_on_host=0 --set offload.checkpoints_on_host=0
     --set lora.rank=8 --set lora.alpha=16 --save-every 4)
"$STRATA_BIN" train --init-from "$work/base" "${run[@]}" --checkpoint-dir "$work/ckpt" \
  --metrics "$work/metrics.jsonl" 2>"$work/train.log" || fail "train: $(tail -1 "$work/train.log")"
grep -q 'lora: rank 8, alpha 16 on 7 of 7 modules per layer' "$work/train.log" ||
  fail "the log does not say what trains: $(grep lora "$work/train.log")"
ckpt="$work/ckpt/step-0000000$steps"
[ -f "$ckpt/manifest.json" ] || fail "no checkpoint at $ckpt"

mkdir -p "$work/resumed" && cp -r "$work/ckpt/step-00000004" "$work/resumed/"
# --resume alone: the run continued is the checkpoint's (its model, from --init-from, and config).
"$STRATA_BIN" train --quiet --save-every 4 --checkpoint-dir "$work/resumed" --resume "$work/resumed"
for f in model.safetensors exp_avg.safetensors exp_avg_sq.safetensors; do
  cmp -s "$ckpt/$f" "$work/resumed/step-0000000$steps/$f" || fail "resumed $f differs"
done
/usr/bin/python3 - "$ckpt/trainer_state.json" "$work/resumed/step-0000000$steps/trainer_state.json" \
  "$work/base" <<'PY' || fail "the resumed run lost its base model (Note [Base model])"
import json, os, sys
a, b = (json.load(open(p)).get("base_model") for p in sys.argv[1:3])
want = json.load(open(os.path.join(sys.argv[3], "config.json")))
sys.exit(0 if a == b and a["path"] == os.path.abspath(sys.argv[3]) and a["config"] == want else 1)
PY
echo "ok   resumed at step 4 by --resume alone: the step-$steps checkpoint is bit-identical"
status=0
err=$("$STRATA_BIN" train --quiet --resume "$work/ckpt/step-00000004" --set model.n_layer=3 2>&1) ||
  status=$?
[ "$status" -eq 2 ] && [ "$(grep -c . <<<"$err")" -eq 1 ] && grep -q "model.n_layer" <<<"$err" ||
  fail "a --set against the resumed model: status $status, '$err'"
echo "ok   a --set against the resumed model: $err"

/usr/bin/python3 - "$STRATA_SOURCE_DIR/tools" "$work/base" "$ckpt/model.safetensors" \
  "$work/metrics.jsonl" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
import torch_gpt2 as tg
import torch_hf_dir as hfd

base = hfd.read_tensors(sys.argv[2])
trained, _ = tg.read_safetensors(sys.argv[3])
def fail(msg):
    sys.exit(f"finetune_llama_lora: FAILED: {msg}")
adapters = {n for n in trained if ".lora_" in n}
if set(trained) - adapters != set(base):
    fail(f"checkpoint tensors {sorted(set(trained) - adapters)[:3]} != base {sorted(base)[:3]}")
for name, raw in base.items():
    want = tg.to_torch(raw).float()
    got = tg.to_torch(trained[name])
    if not torch.equal(got.view(torch.int32), want.view(torch.int32)):
        fail(f"base tensor {name} changed: max |diff| {(got - want).abs().max().item()}")
expected = 2 * 2 * 7  # A and B, 2 layers, 7 modules
if len(adapters) != expected:
    fail(f"{len(adapters)} adapter tensors, expected {expected}")
for name in adapters:
    if name.endswith("lora_B.weight") and not tg.to_torch(trained[name]).abs().max() > 0:
        fail(f"{name} is still zero: the adapters did not train")
print(f"ok   the base's {len(base)} tensors are the imported bits; {len(adapters)} adapters trained")
losses = [json.loads(l)["loss"] for l in open(sys.argv[4]) if '"loss"' in l]
if len(losses) < 2 or not losses[-1] < losses[0] - 0.05:
    fail(f"the loss did not fall: {losses}")
print(f"ok   trained: loss {losses[0]:.4f} -> {losses[-1]:.4f} over {len(losses)} steps")
PY
