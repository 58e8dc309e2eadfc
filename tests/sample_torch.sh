#!/usr/bin/env bash
# CTest `sample_torch`: `strata sample` (Note [Sampling] in src/model/sample.h) on a trained
# checkpoint.
#  - Greedy (temperature 0) equals a PyTorch greedy loop on the exported weights token for token
#    (tools/torch_sample.py, on the windows Note [Sampling] documents), for GPT-2 and Llama, past
#    the context length, so both the key/value cache and the window's slides are exercised.
#  - The same seed gives the same text; another seed other text; top-k 1 is greedy.
#  - A model larger than the few blocks it holds samples in the memory of a few blocks.
#  - A Hugging Face directory samples as it is (--model), as its checkpoint does.
#  - Bad input exits 2 with one line: a missing checkpoint, a prompt token outside the
#    vocabulary, a negative temperature, both --checkpoint and --model.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_SOURCE_DIR:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/sample_torch"
rm -rf "$work" && mkdir -p "$work"
fail() { echo "sample_torch: FAILED: $*" >&2; exit 1; }

"$STRATA_BIN" train --set model.n_layer=2 --set model.n_embd=64 --set model.context_length=32 \
  --set train.seq_len=32 --set train.batch_size=4 --set train.steps=150 --save-every 150 \
  --checkpoint-dir "$work/ckpt" --quiet 2>/dev/null
"$STRATA_BIN" export --checkpoint "$work/ckpt" --out "$work/export/model.safetensors" 2>/dev/null

prompt="84 104 101 32"  # "The "
strata=$("$STRATA_BIN" sample --checkpoint "$work/ckpt" --prompt-tokens "$prompt" --tokens 40 \
  --temperature 0 --print-tokens)
torch=$(/usr/bin/python3 "$STRATA_SOURCE_DIR/tools/torch_sample.py" \
  "$work/export/model.safetensors" "$prompt" 40)
[ "$strata" = "$torch" ] || fail "greedy tokens differ from PyTorch's:
strata: $strata
torch:  $torch"
echo "ok   greedy: 40 tokens past a 32-token context equal PyTorch's"
nocache=$("$STRATA_BIN" sample --checkpoint "$work/ckpt" --prompt-tokens "$prompt" --tokens 40 \
  --temperature 0 --print-tokens --no-kv-cache)
[ "$strata" = "$nocache" ] || fail "--no-kv-cache gave other tokens:
cache:    $strata
no cache: $nocache"
echo "ok   --no-kv-cache: the same 40 tokens"

# The same for Llama (GQA, untied head): the cache holds the rotated keys.
"$STRATA_BIN" train --set model.arch=llama --set model.n_kv_head=2 --set model.tie_embeddings=false \
  --set model.n_layer=2 --set model.n_embd=64 --set model.context_length=32 \
  --set train.seq_len=32 --set train.batch_size=4 --set train.steps=150 --save-every 150 \
  --checkpoint-dir "$work/llama" --quiet 2>/dev/null
"$STRATA_BIN" export --checkpoint "$work/llama" --out "$work/llama_export/model.safetensors" \
  2>/dev/null
strata=$("$STRATA_BIN" sample --checkpoint "$work/llama" --prompt-tokens "$prompt" --tokens 40 \
  --temperature 0 --print-tokens)
torch=$(/usr/bin/python3 "$STRATA_SOURCE_DIR/tools/torch_sample.py" \
  "$work/llama_export/model.safetensors" "$prompt" 40)
[ "$strata" = "$torch" ] || fail "Llama greedy tokens differ from PyTorch's:
strata: $strata
torch:  $torch"
echo "ok   greedy Llama: 40 tokens past a 32-token context equal PyTorch's"
base_tokens=$strata
# The exported directory is a Hugging Face model: sampled as it is (--model), the same tokens.
hf=$("$STRATA_BIN" sample --model "$work/llama_export" --prompt-tokens "$prompt" --tokens 40 \
  --temperature 0 --print-tokens)
[ "$hf" = "$torch" ] || fail "sample --model of the export differs from PyTorch's:
strata: $hf
torch:  $torch"
echo "ok   sample --model HF_DIR: the same 40 tokens from the exported directory"

# A LoRA fine-tune of that Llama (Note [LoRA]): sample runs the base with the adapters merged as
# it reads them, and its greedy tokens are PyTorch's on the merged export (Note [Merged export]).
# Trained on other text than the base, so that the adapters change what greedy says.
for i in $(seq 400); do printf 'The zebra quizzed %d jolly vixens. ' "$i"; done >"$work/zebra.txt"
"$STRATA_BIN" prepare --in "$work/zebra.txt" --out "$work/zebra.bin" 2>/dev/null
"$STRATA_BIN" train --init-from "$work/llama_export" --set lora.rank=4 --set lora.alpha=16 \
  --set data.train="$work/zebra.bin" --set optim.lr=1e-2 --set train.seq_len=32 \
  --set train.batch_size=4 --set train.steps=60 \
  --save-every 60 --checkpoint-dir "$work/lora" --quiet 2>/dev/null
"$STRATA_BIN" export --checkpoint "$work/lora" --merge --out "$work/lora_merged/model.safetensors" \
  2>/dev/null
strata=$("$STRATA_BIN" sample --checkpoint "$work/lora" --prompt-tokens "$prompt" --tokens 40 \
  --temperature 0 --print-tokens)
torch=$(/usr/bin/python3 "$STRATA_SOURCE_DIR/tools/torch_sample.py" \
  "$work/lora_merged/model.safetensors" "$prompt" 40)
[ "$strata" = "$torch" ] || fail "LoRA greedy tokens differ from PyTorch's on the merged model:
strata: $strata
torch:  $torch"
[ "$strata" != "$base_tokens" ] || fail "the adapters changed no greedy token: $strata"
echo "ok   greedy LoRA Llama: 40 tokens equal PyTorch's on the merged weights, not the base's"

sample() { "$STRATA_BIN" sample --checkpoint "$work/ckpt" --prompt "The " --tokens 40 "$@"; }
a=$(sample --temperature 0.9 --top-k 40 --seed 7)
b=$(sample --temperature 0.9 --top-k 40 --seed 7)
c=$(sample --temperature 0.9 --top-k 40 --seed 8)
[ "$a" = "$b" ] || fail "the same seed gave different text: '$a' and '$b'"
[ "$a" != "$c" ] || fail "seeds 7 and 8 gave the same text: '$a'"
[ "$(sample --top-k 1 --seed 5 --print-tokens)" = "$(sample --temperature 0 --print-tokens)" ] ||
  fail "top-k 1 is not greedy"
echo "ok   seeded: the same seed repeats its text, another seed does not, top-k 1 is greedy"

# Memory: a model of 8 blocks of 512 channels (25M parameters, 101 MB of weights) samples with
# a peak RSS above the tiny model's by less than five of its blocks (12.6 MB each) with
# --resident-bytes 0: blocks are read one at a time, never the model. With the default (half the
# available memory) the blocks are kept: the RSS holds them.
"$STRATA_BIN" train --set model.n_layer=8 --set model.n_embd=512 --set model.n_head=8 \
  --set model.context_length=64 --set train.seq_len=64 --set train.batch_size=2 \
  --set train.steps=1 --save-every 1 --checkpoint-dir "$work/big" --quiet 2>/dev/null
/usr/bin/python3 - "$STRATA_BIN" "$work/ckpt" "$work/big" <<'PY' || fail "sampling held more than a few blocks, or did not keep them"
import resource, subprocess, sys
def peak_mb(ckpt, *flags):
    # ru_maxrss of the children is the largest so far, so the runs go smallest first.
    subprocess.run([sys.argv[1], "sample", "--checkpoint", ckpt, "--tokens", "8",
                    "--temperature", "0", *flags], check=True, stdout=subprocess.DEVNULL)
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
small = peak_mb(sys.argv[2], "--resident-bytes", "0")
big = peak_mb(sys.argv[3], "--resident-bytes", "0")
kept = peak_mb(sys.argv[3])
block_mb = 12 * 512 * 512 * 4 / 2**20
print(f"ok   memory: peak RSS {big:.1f} MB streaming 101 MB of weights, {small:.1f} MB for the "
      f"tiny model; {big - small:.1f} MB more, the bound {5 * block_mb:.1f} MB (5 blocks); "
      f"{kept:.1f} MB with the 8 blocks kept ({8 * block_mb:.1f} MB)")
sys.exit(0 if big - small < 5 * block_mb and kept - big > 6 * block_mb else 1)
PY

expect_refused() {  # NAME PATTERN ARGS...
  local name=$1 pattern=$2 err status=0
  shift 2
  err=$("$STRATA_BIN" sample "$@" 2>&1 >/dev/null) || status=$?
  if [ "$status" -ne 2 ] || [ "$(printf '%s\n' "$err" | grep -c .)" -ne 1 ] ||
    ! grep -qE -- "$pattern" <<<"$err"; then
    fail "$name: status $status, wanted 2 and /$pattern/; got: $err"
  fi
  echo "ok   $name: $err"
}
expect_refused missing_checkpoint 'nope' --checkpoint "$work/nope"
expect_refused token_outside_vocab 'prompt token 300 is outside the vocabulary' \
  --checkpoint "$work/ckpt" --prompt-tokens "1 300"
expect_refused negative_temperature '--temperature' --checkpoint "$work/ckpt" --temperature -1
expect_refused bad_resident_bytes '--resident-bytes' --checkpoint "$work/ckpt" --resident-bytes 2XB
expect_refused both_sources 'one of them' --checkpoint "$work/ckpt" --model "$work/llama_export"
expect_refused model_not_hf 'config.json' --model "$work/ckpt"
