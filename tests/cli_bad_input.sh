#!/usr/bin/env bash
# CTest `cli_bad_input`: every kind of bad input to `strata train` is refused before training
# with exit status 2 and ONE line naming the field or file at fault.
set -uo pipefail
: "${STRATA_BIN:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/cli_bad_input"
rm -rf "$work" && mkdir -p "$work"
failures=0 passed=0

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

printf '{"model": {"n_layer": 2,}' >"$work/malformed.json"
printf '{"model": {"n_layers": 2}}' >"$work/unknown_nested.json"
printf '{"modle": {}}' >"$work/unknown_top.json"
printf '{"train": {"steps": "ten"}}' >"$work/wrong_type.json"
printf '{"train": {"steps": 2.5}}' >"$work/not_integer.json"
printf '{"train": {"seq_len": 256}}' >"$work/too_long.json"

# A device that cannot run here: without a GPU (or a CUDA build) the device is refused naming why;
# with one, the trainers refuse it (they run on the CPU device for now). Either way one line, 2.
expect_error device_cuda 'device cuda cannot run here|CPU device only' train --device cuda
expect_error device_unknown "--device 'tpu' is not one of cpu, cuda" train --device tpu
expect_error device_config_unknown "device 'gpu' is not one of cpu, cuda" train --set device=gpu
expect_error precision_unknown "train.precision 'fp16' is not one of f32, bf16" train \
  --set train.precision=fp16
expect_error missing_config 'nope\.json' train --config "$work/nope.json"
expect_error malformed_config 'malformed\.json' train --config "$work/malformed.json"
expect_error unknown_nested_key 'model\.n_layers' train --config "$work/unknown_nested.json"
expect_error unknown_top_key 'modle' train --config "$work/unknown_top.json"
expect_error wrong_type 'train\.steps' train --config "$work/wrong_type.json"
expect_error not_integer 'train\.steps' train --config "$work/not_integer.json"
expect_error sequence_too_long 'train\.seq_len.*model\.context_length' train --config "$work/too_long.json"
expect_error set_unknown_key 'optim\.learning_rate' train --set optim.learning_rate=1
expect_error set_no_equals 'optim\.lr' train --set optim.lr
expect_error heads_do_not_divide 'n_head|n_embd' train --set model.n_head=3
expect_error unknown_flag '--bogus' train --bogus
expect_error missing_data_file 'missing\.bin' train --set data.train="$work/missing.bin"
expect_error missing_val_file 'data\.val.*missing_val\.bin' train --set data.val="$work/missing_val.bin"
expect_error eval_without_val 'train\.eval_every 5 needs data\.val' train --set train.eval_every=5
expect_error eval_batches_zero 'train\.eval_batches' train --set data.val=embedded --set train.eval_batches=0

# A token file whose magic is wrong, declared as llm.c format.
python3 - "$work" <<'PY'
import struct, sys
d = sys.argv[1]
hdr = [0] * 256
hdr[0], hdr[1], hdr[2] = 12345, 1, 100
open(f"{d}/bad_magic.bin", "wb").write(struct.pack("<256i", *hdr) + b"\x01\x00" * 100)
hdr[0] = 20240520
# header says 100 tokens, file holds 90
open(f"{d}/short.bin", "wb").write(struct.pack("<256i", *hdr) + b"\x01\x00" * 90)
# token 300 is outside the byte-level vocabulary of 256
open(f"{d}/big_token.bin", "wb").write(struct.pack("<256i", *hdr) + struct.pack("<100H", *([300] * 100)))
PY
expect_error wrong_magic 'bad_magic\.bin.*magic' train --set data.train="$work/bad_magic.bin" --set data.format=llmc
expect_error size_disagrees 'short\.bin' train --set data.train="$work/short.bin"
expect_error token_out_of_range 'big_token\.bin.*300' train --set data.train="$work/big_token.bin"
# data.format auto reads llm.c files only; a text file used to train as raw uint16 tokens.
printf 'The quick brown fox.\n' >"$work/corpus.txt"
expect_error auto_is_llmc_only 'corpus\.txt does not start with llm\.c.s magic.*data\.format=raw_u16' \
  train --set data.train="$work/corpus.txt"

# Hardening (issue 19). 200,000 nested arrays in a config overflowed the stack (SIGSEGV, 139);
# grad_accum 2^62 wrapped to 0 tokens/step and crashed, 2^40 died of bad_alloc; a path that is
# not UTF-8 trained and then aborted at the first checkpoint.
python3 -c 'n = 200000; print("{\"train\": " + "[" * n + "]" * n + "}")' >"$work/deep.json"
expect_error deep_json 'deep\.json is not valid JSON: line 1, column 74: .*deeper than 64' \
  train --config "$work/deep.json"
expect_error deep_set 'deeper than 64' train --set "train.steps=$(printf '%.0s[' {1..20000})"
expect_error grad_accum_2_62 'train\.grad_accum must be in \[1, 268435456' \
  train --set train.grad_accum=4611686018427387904
expect_error grad_accum_2_40 'train\.grad_accum' train --set train.grad_accum=1099511627776
expect_error tokens_per_step 'tokens per step .* exceed' train --set train.grad_accum=1000000
expect_error n_layer_bound 'model\.n_layer must be in \[1, 4096' train --set model.n_layer=100000
expect_error not_utf8 'data\.train is not UTF-8 text \(byte 0xe9 at offset 1\)' \
  train --set data.train=$'k\xe9.bin'

# LoRA (Note [LoRA] in src/model/lora.h): the lora.* keys against the model, before training.
lora=(train --set lora.rank=4)
llama=(--set model.arch=llama --set model.n_kv_head=2)
expect_error lora_rank_negative 'lora\.rank must be >= 0, got -1' train --set lora.rank=-1
expect_error lora_rank_above_matrix "lora\.rank 200 is above attn\.c_attn's smaller side 128" \
  train --set lora.rank=200
expect_error lora_rank_above_gqa_k "lora\.rank 80 is above self_attn\.k_proj's smaller side 64" \
  train "${llama[@]}" --set lora.rank=80
expect_error lora_target_unknown 'lora\.targets names qproj, which matches no linear layer' \
  "${lora[@]}" "${llama[@]}" --set lora.targets=q_proj,qproj
expect_error lora_target_other_arch 'lora\.targets names q_proj, which matches no .* gpt2 block' \
  "${lora[@]}" --set lora.targets=q_proj
expect_error lora_targets_empty 'lora\.targets is empty' "${lora[@]}" --set 'lora.targets=[]'
expect_error lora_target_lm_head 'lora\.targets names lm_head.*lora\.modules_to_save' \
  "${lora[@]}" --set lora.targets=lm_head
expect_error lora_save_unknown 'lora\.modules_to_save names c_fc' \
  "${lora[@]}" --set lora.modules_to_save=c_fc
expect_error lora_dropout_one 'lora\.dropout 1 drops every input of the adapters; it must be below 1' \
  "${lora[@]}" --set lora.dropout=1
expect_error lora_dropout_range 'lora\.dropout' "${lora[@]}" --set lora.dropout=-0.1
expect_error lora_nf4 'lora\.base_precision nf4: a quantized base is not implemented yet' \
  "${lora[@]}" --set lora.base_precision=nf4
expect_error lora_bf16_base 'lora\.base_precision bf16 needs train\.precision bf16' \
  "${lora[@]}" --set lora.base_precision=bf16

# A plan's number of data-parallel ranks (docs/design.md §12).
expect_error plan_ranks_zero "--ranks must be an integer from 1 to 4096, got '0'" \
  plan --profile "${STRATA_SOURCE_DIR:?}/profiles/a100-80gb-4nvme.json" --model gpt-65b --ranks 0

# strata gather (Note [Sharded checkpoints]): its flags, and a checkpoint that is not there.
expect_error gather_flags '--checkpoint DIR and --out ROOT are both required' \
  gather --checkpoint "$work"
expect_error gather_missing "no complete checkpoint in $work" \
  gather --checkpoint "$work" --out "$work/gathered"

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
