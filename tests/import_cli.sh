#!/usr/bin/env bash
# CTest `import_cli`: `strata train --init-from DIR` (Note [Hugging Face import]) on models written
# by tools/make_hf_fixture.py (Debian's python3-torch): GPT-2 and Llama directories import and
# train, the model comes from DIR/config.json and a model field the config sets must agree with
# it; every bad directory (a truncated shard, a missing tensor, a wrong shape, an integer dtype,
# an index naming a missing file, an unknown tensor, an unsupported model_type or config field)
# and --init-from with --resume is refused before training with exit status 2 and one line
# naming the file and the tensor or field.
set -uo pipefail
: "${STRATA_BIN:?}" "${STRATA_SOURCE_DIR:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/import_cli"
rm -rf "$work" && mkdir -p "$work"
failures=0 passed=0
# Every fixture at once: one Python start and torch import instead of one per fixture.
/usr/bin/python3 "$STRATA_SOURCE_DIR/tools/make_hf_fixture.py" --each-line - <<FIXTURES ||
$work/gpt2 --arch gpt2 --dtype bf16 --prefix --buffers --lm-head
$work/gpt2_sharded --arch gpt2 --dtype f16 --shards 3
$work/llama --arch llama --dtype f32 --shards 2 --buffers
$work/llama_tied --arch llama --dtype bf16 --tied --rope-scaling --kv-heads 1
$work/llama_mha --arch llama --kv-heads 4
$work/missing --arch gpt2
$work/shape --arch gpt2
$work/int --arch gpt2
$work/unknown --arch gpt2
$work/qwen --arch llama --config 'model_type="qwen2"'
$work/biased --arch llama --config 'attention_bias=true'
$work/yarn --arch llama --config 'rope_scaling={"rope_type": "yarn", "factor": 4}'
$work/relu --arch gpt2 --config 'activation_function="relu"'
FIXTURES
  { echo "import_cli: FAILED: writing the fixtures (Debian's python3-torch, /usr/bin/python3)" >&2
    exit 1; }
short=(--set train.steps=1 --set train.batch_size=2 --set train.seq_len=32)

# expect_error NAME PATTERN ARGS...: exit status 2, one stderr line, matching PATTERN.
expect_error() {
  local name=$1 pattern=$2
  shift 2
  local err status
  err=$("$STRATA_BIN" "$@" 2>&1 >/dev/null)
  status=$?
  local lines
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [ "$status" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -qE -- "$pattern" <<<"$err"; then
    echo "FAIL $name: status $status, $lines lines, wanted /$pattern/; got: $err"
    failures=$((failures + 1))
  else
    echo "ok   $name: $err"
    passed=$((passed + 1))
  fi
}

# expect_ok NAME PATTERN ARGS...: exit status 0 and a log line matching PATTERN.
expect_ok() {
  local name=$1 pattern=$2
  shift 2
  local out status
  out=$("$STRATA_BIN" "$@" 2>&1)
  status=$?
  if [ "$status" -ne 0 ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL $name: status $status, wanted /$pattern/; got: $out"
    failures=$((failures + 1))
  else
    echo "ok   $name: $(grep -E -- "$pattern" <<<"$out" | head -1)"
    passed=$((passed + 1))
  fi
}

# edit_header FILE PYTHON: rewrites FILE's safetensors header (a dict `h`, name -> entry) with
# PYTHON, keeping the data as it is (offsets are relative to the data, so the header may grow).
edit_header() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, struct, sys
path, code = sys.argv[1], sys.argv[2]
blob = open(path, "rb").read()
(n,) = struct.unpack("<Q", blob[:8])
h = json.loads(blob[8:8 + n])
exec(code)
text = json.dumps(h).encode()
text += b" " * ((8 - len(text) % 8) % 8)
open(path, "wb").write(struct.pack("<Q", len(text)) + text + blob[8 + n:])
PY
}


# ---- Imports that work ---------------------------------------------------------------------------
expect_ok gpt2 'imported .*gpt2 \(gpt2\): 28 tensors, .* parameters, BF16, .* read in .* s; ignored 5 tensors' \
  train --init-from "$work/gpt2" "${short[@]}"
expect_ok gpt2_sharded_f16 'imported .*gpt2_sharded \(gpt2\): 28 tensors, .*F16' \
  train --init-from "$work/gpt2_sharded" "${short[@]}"
expect_ok llama_gqa 'imported .*llama \(llama\): 21 tensors, .*F32' \
  train --init-from "$work/llama" "${short[@]}"
expect_ok llama_tied 'imported .*llama_tied \(llama\): 20 tensors, .*BF16' \
  train --init-from "$work/llama_tied" "${short[@]}"
# The model fields a config sets agree with DIR's: accepted (n_kv_head 0 is n_head's count).
printf '{"model": {"n_layer": 2, "n_embd": 64, "arch": "llama"}}' >"$work/agrees.json"
expect_ok agreeing_config 'imported' train --init-from "$work/llama" --config "$work/agrees.json" \
  --set model.n_kv_head=2 "${short[@]}"
expect_ok n_kv_head_zero_is_n_head 'imported' train --init-from "$work/llama_mha" \
  --set model.n_kv_head=0 "${short[@]}"

# ---- The config disagrees ---------------------------------------------------------------------
expect_error disagreeing_set 'model\.n_layer 3.*config\.json gives 2' \
  train --init-from "$work/gpt2" --set model.n_layer=3 "${short[@]}"
printf '{"model": {"vocab_size": 512}}' >"$work/disagrees.json"
expect_error disagreeing_config_file 'model\.vocab_size 512.*gives 256' \
  train --init-from "$work/gpt2" --config "$work/disagrees.json" "${short[@]}"
expect_error disagreeing_arch 'model\.arch "gpt2".*gives "llama"' \
  train --init-from "$work/llama" --set model.arch=gpt2 "${short[@]}"
expect_error with_resume '--init-from and --resume' \
  train --init-from "$work/gpt2" --resume "$work/ckpt" "${short[@]}"
expect_error no_directory 'nope: no such directory' train --init-from "$work/nope" "${short[@]}"

# ---- Bad directories ----------------------------------------------------------------------------
cp -r "$work/gpt2_sharded" "$work/truncated"
shard="$work/truncated/model-00003-of-00003.safetensors"
truncate -s -100 "$shard"
expect_error truncated_shard "model-00003-of-00003\.safetensors: tensor 'ln_f\.bias'.*outside the data section of [0-9]+ bytes" \
  train --init-from "$work/truncated" "${short[@]}"

cp -r "$work/gpt2_sharded" "$work/missing_shard"
rm "$work/missing_shard/model-00002-of-00003.safetensors"
expect_error index_names_missing_file 'model\.safetensors\.index\.json names shard model-00002-of-00003\.safetensors' \
  train --init-from "$work/missing_shard" "${short[@]}"

edit_header "$work/missing/model.safetensors" 'del h["h.1.mlp.c_fc.bias"]'
expect_error missing_tensor "model\.safetensors: tensor 'h\.1\.mlp\.c_fc\.bias' is missing" \
  train --init-from "$work/missing" "${short[@]}"

edit_header "$work/shape/model.safetensors" 'h["h.0.attn.c_attn.weight"]["shape"] = [192, 64]'
expect_error wrong_shape "tensor 'h\.0\.attn\.c_attn\.weight' has shape \(192, 64\), expected \(64, 192\)" \
  train --init-from "$work/shape" "${short[@]}"

edit_header "$work/int/model.safetensors" 'h["wpe.weight"]["dtype"] = "I32"'
expect_error integer_dtype "model\.safetensors: tensor 'wpe\.weight' is I32, expected F32, BF16 or F16" \
  train --init-from "$work/int" "${short[@]}"

edit_header "$work/unknown/model.safetensors" \
  'h["h.0.attn.rotary.weight"] = {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}'
expect_error unknown_tensor "tensor 'h\.0\.attn\.rotary\.weight' is not a parameter of the gpt2 model" \
  train --init-from "$work/unknown" "${short[@]}"

expect_error unsupported_model_type 'qwen/config\.json: model_type "qwen2" is not supported \(Strata imports gpt2 and llama\)' \
  train --init-from "$work/qwen" "${short[@]}"
expect_error attention_bias 'biased/config\.json: attention_bias is true' \
  train --init-from "$work/biased" "${short[@]}"
expect_error rope_scaling_yarn "yarn/config\.json: rope_scaling\.rope_type 'yarn' is not supported" \
  train --init-from "$work/yarn" "${short[@]}"
expect_error gpt2_activation "relu/config\.json: activation_function is 'relu'" \
  train --init-from "$work/relu" "${short[@]}"

echo "import_cli: $passed passed, $failures failed"
[ "$failures" -eq 0 ]
