#!/usr/bin/env bash
# CTest `peft_export_torch` (GPT-2) and `peft_export_torch_llama` (argument "llama": GQA, untied
# head): a LoRA fine-tune of a random-weight Hugging Face base (tools/make_hf_fixture.py), its
# checkpoint exported twice by `strata export`: the PEFT adapter (A/) and, with --merge, the merged
# model (M/; sharded for Llama). tools/torch_peft_check.py applies the adapter unmerged over the
# base in PyTorch and must get the merged model's logits (1e-5 relative); it also refuses an
# adapter file holding anything but the adapters and modules_to_save, or targets that do not
# match exactly the adapted modules. GPT-2 adapts c_attn and attn.c_proj only (so
# target_modules must say attn.c_proj, not c_proj) and trains wte in full; Llama adapts q, k, v
# and down and trains its untied lm_head. --merge of a checkpoint without LoRA, --shard-size for
# an adapter and a file --out for one are refused: exit 2, one line naming the flag.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_SOURCE_DIR:?}" "${STRATA_BINARY_DIR:?}"
arch=${1:-gpt2}
name=peft_export_torch$([ "$arch" = gpt2 ] || echo "_$arch")
work="$STRATA_BINARY_DIR/test_tmp/$name"
rm -rf "$work" && mkdir -p "$work"
fail() { echo "$name: FAILED: $*" >&2; exit 1; }
/usr/bin/python3 -c "import torch" 2>/dev/null ||
  fail "needs Debian's python3-torch (/usr/bin/python3)"

case "$arch" in
  gpt2)
    fixture=(--arch gpt2)
    lora=(--set lora.targets=c_attn,attn.c_proj --set lora.modules_to_save=wte)
    merged_flags=()
    want_targets='["c_attn", "attn.c_proj"]' want_saved='["wte"]' ;;
  llama)
    fixture=(--arch llama --kv-heads 2 --untied)
    lora=(--set lora.targets=q_proj,k_proj,v_proj,down_proj --set lora.modules_to_save=lm_head)
    merged_flags=(--shard-size 40KB)
    want_targets='["q_proj", "k_proj", "v_proj", "down_proj"]' want_saved='["lm_head"]' ;;
  *) fail "unknown architecture '$arch' (gpt2 or llama)" ;;
esac
/usr/bin/python3 "$STRATA_SOURCE_DIR/tools/make_hf_fixture.py" "$work/base" "${fixture[@]}" \
  --dtype f32 --layers 2 --embd 64 --heads 4 --vocab 256 --ctx 64

# A high learning rate, so B is far from zero after a few steps and the check can tell.
"$STRATA_BIN" train --init-from "$work/base" --quiet --set lora.rank=4 --set lora.alpha=8 \
  "${lora[@]}" --set train.steps=4 --set train.seq_len=32 --set train.batch_size=2 \
  --set optim.lr=1e-2 --set optim.warmup_steps=1 --save-every 4 --checkpoint-dir "$work/ckpt"
ckpt="$work/ckpt/step-00000004"
[ -f "$ckpt/manifest.json" ] || fail "no checkpoint at $ckpt"

"$STRATA_BIN" export --checkpoint "$ckpt" --out "$work/A/"
"$STRATA_BIN" export --checkpoint "$ckpt" --out "$work/M/" --merge "${merged_flags[@]}"
[ "$arch" = gpt2 ] || [ -f "$work/M/model.safetensors.index.json" ] || fail "M/ is not sharded"
/usr/bin/python3 - "$work/A/adapter_config.json" "$want_targets" "$want_saved" "$arch" \
  "$work/base" <<'PY'
import json, os, sys
c = json.load(open(sys.argv[1]))
want = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4, "lora_alpha": 8,
        "lora_dropout": 0.0, "target_modules": json.loads(sys.argv[2]),
        "fan_in_fan_out": sys.argv[4] == "gpt2", "modules_to_save": json.loads(sys.argv[3]),
        "bias": "none", "use_rslora": False, "use_dora": False, "init_lora_weights": True,
        "base_model_name_or_path": os.path.abspath(sys.argv[5])}  # Note [Base model]
if c != want:
    sys.exit(f"adapter_config.json is {c}, expected {want}")
print(f"ok   adapter_config.json: target_modules {c['target_modules']}, "
      f"modules_to_save {c['modules_to_save']}, base {c['base_model_name_or_path']}")
PY
# The merged export's config.json is the imported one wherever Strata sets nothing (Note [Base
# model]): every imported key is there, the special token ids equal; generation_config.json
# carries them.
/usr/bin/python3 - "$work/base/config.json" "$work/M/config.json" "$work/M/generation_config.json" \
  <<'PY' || fail "the merged export's config.json lost what the import had"
import json, sys
base, out = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
missing = sorted(set(base) - set(out))
kept = ["bos_token_id", "eos_token_id", "torch_dtype", "initializer_range"]
differ = [k for k in kept if k in base and base[k] != out.get(k)]
gen = json.load(open(sys.argv[3]))
ids = {k: base[k] for k in ("bos_token_id", "eos_token_id") if k in base}
if missing or differ or any(gen.get(k) != v for k, v in ids.items()):
    sys.exit(f"missing {missing}, differ {differ}, generation_config {gen}")
print(f"ok   M/config.json keeps the imported fields; generation_config.json {gen}")
PY

/usr/bin/python3 - "$work/tokens.safetensors" <<'PY'
import json, struct, sys
B, T = 2, 24
tokens = [(7 * i + 3 * (i // T)) % 256 for i in range(B * T)]
header = json.dumps({"tokens": {"dtype": "I32", "shape": [B, T],
                                "data_offsets": [0, 4 * B * T]}}).encode()
header += b" " * (-len(header) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(header)) + header + struct.pack(f"<{B * T}i", *tokens))
PY
/usr/bin/python3 "$STRATA_SOURCE_DIR/tools/torch_peft_check.py" "$work/base" "$work/A" "$work/M" \
  "$work/tokens.safetensors"

# expect_refused NAME PATTERN ARGS...: `strata` exits 2 with one stderr line matching PATTERN.
expect_refused() {
  local what=$1 pattern=$2
  shift 2
  local err status=0
  err=$("$STRATA_BIN" "$@" 2>&1 >/dev/null) || status=$?
  if [ "$status" -ne 2 ] || [ "$(printf '%s\n' "$err" | grep -c .)" -ne 1 ] ||
    ! grep -qE -- "$pattern" <<<"$err"; then
    fail "$what: status $status, wanted 2 and /$pattern/; got: $err"
  fi
  echo "ok   $what: $err"
}
expect_refused adapter_shards '--shard-size' export --checkpoint "$ckpt" --out "$work/X/" \
  --shard-size 1MB
expect_refused adapter_file '--out .*a PEFT adapter is a directory' export --checkpoint "$ckpt" \
  --out "$work/X/adapter.safetensors"
[ ! -e "$work/X" ] || fail "a refused export wrote $work/X"
if [ "$arch" = gpt2 ]; then
  "$STRATA_BIN" train --init-from "$work/base" --quiet --set train.steps=1 --set train.seq_len=32 \
    --set train.batch_size=2 --save-every 1 --checkpoint-dir "$work/full"
  expect_refused merge_without_lora '--merge: .* has no LoRA adapters' export \
    --checkpoint "$work/full" --out "$work/X/" --merge
fi
