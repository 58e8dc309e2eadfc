#!/usr/bin/env bash
# CTest `finetune_llama`: a real fine-tune, end to end. A random-weight Hugging Face Llama (GQA,
# untied head, llama3 rope scaling, bf16 weights in 2 shards; tools/make_hf_fixture.py) is
# imported with --init-from, trained vertically with every state tensor on storage, checkpointed,
# exported with `strata export`, and PyTorch's Llama (tools/torch_llama.py), loading the export by
# its Hugging Face names alone, reproduces Strata's logits (tools/torch_export_check.py: 1e-5
# relative). The loss must fall: the run trained. Resumed from its step-4 checkpoint, the run's
# step-8 checkpoint is bit-identical.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_SOURCE_DIR:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/finetune_llama"
rm -rf "$work" && mkdir -p "$work/store"
fail() { echo "finetune_llama: FAILED: $*" >&2; exit 1; }
/usr/bin/python3 -c "import torch" 2>/dev/null ||
  fail "needs Debian's python3-torch (/usr/bin/python3)"

/usr/bin/python3 "$STRATA_SOURCE_DIR/tools/make_hf_fixture.py" "$work/base" --arch llama \
  --dtype bf16 --shards 2 --layers 3 --embd 64 --heads 4 --kv-heads 2 --ffn 96 --vocab 256 \
  --ctx 64 --rope-scaling --untied

steps=8
run=(--set train.schedule=vertical --set train.steps=$steps --set train.seq_len=64
     --set train.batch_size=4 --set train.grad_accum=2 --set optim.lr=1e-3
     --set optim.warmup_steps=2 --set "io.dirs=[\"$work/store\"]"
     --set offload.params_on_host=0 --set offload.optim_on_host=0
     --set offload.grads_on_host=0 --set offload.checkpoints_on_host=0 --save-every 4)
"$STRATA_BIN" train --init-from "$work/base" --quiet "${run[@]}" --checkpoint-dir "$work/ckpt" \
  --metrics "$work/metrics.jsonl"
ckpt="$work/ckpt/step-0000000$steps"
[ -f "$ckpt/manifest.json" ] || fail "no checkpoint at $ckpt"
# Resumed from step 4, the Llama's step-8 checkpoint is the same, byte for byte.
mkdir -p "$work/resumed" && cp -r "$work/ckpt/step-00000004" "$work/resumed/"
"$STRATA_BIN" train --quiet --config "$work/ckpt/step-00000004/config.json" "${run[@]}" \
  --checkpoint-dir "$work/resumed" --resume "$work/resumed/step-00000004"
for f in model.safetensors exp_avg.safetensors exp_avg_sq.safetensors; do
  cmp -s "$ckpt/$f" "$work/resumed/step-0000000$steps/$f" || fail "resumed $f differs"
done
echo "ok   resumed at step 4: the step-$steps checkpoint is bit-identical"
python3 - "$work/metrics.jsonl" <<'PY'
import json, sys
losses = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l]
if len(losses) < 2 or not losses[-1] < losses[0] - 0.05:
    sys.exit(f"finetune_llama: FAILED: the loss did not fall: {losses}")
print(f"ok   trained: loss {losses[0]:.4f} -> {losses[-1]:.4f} over {len(losses)} steps")
PY

"$STRATA_BIN" export --checkpoint "$ckpt" --out "$work/export/" 2>"$work/export.log"
cat "$work/export.log"
grep -q '"model_type": "llama"' "$work/export/config.json" || fail "the export is not a Llama"
"$STRATA_BINARY_DIR/tests/export_logits" --checkpoint "$ckpt" \
  --exported "$work/export/model.safetensors" --out "$work/logits.safetensors"
/usr/bin/python3 "$STRATA_SOURCE_DIR/tools/torch_export_check.py" \
  "$work/export/model.safetensors" "$work/logits.safetensors"
