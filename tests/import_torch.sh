#!/usr/bin/env bash
# CTest `import_torch`: a Hugging Face model imported with `strata train --init-from` computes
# what PyTorch computes on the same file: the first step's loss (before any update) equals
# PyTorch's loss on the same weights and batch to 1e-5 relative, for models written by
# tools/make_hf_fixture.py: GPT-2 in F32, BF16 (sharded, GPT2LMHeadModel's names, buffers and a
# tied lm_head) and F16; Llama with grouped-query attention in F32 (untied, sharded, rotary
# buffers), BF16 (tied, one KV head, llama3 rope scaling), F16, and Llama 3.1's shape (131072
# positions, llama3 scaling from 8192, vocabulary 128256: imported as it is, nothing allocated
# by its context; its export keeps those fields). PyTorch reads the files by
# their HF names alone (tools/torch_gpt2.py's and tools/torch_llama.py's models, GPT-2's Conv1D
# weights transposed back). And import -> checkpoint -> `strata export` -> import is
# bit-identical, for the F32 GPT-2 and Llama: a run at a learning rate of 1e-30 checkpoints the
# imported weights unchanged, its export holds every imported tensor byte for byte, and a run
# imported from the export starts at the same loss, bit for bit.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_SOURCE_DIR:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/import_torch"
rm -rf "$work" && mkdir -p "$work"
fail() { echo "import_torch: FAILED: $*" >&2; exit 1; }
B=4 T=64

/usr/bin/python3 - "$work/text.txt" <<'PY'
import random, sys
random.seed(7)
words = "the of a storage model block gradient weights step loss disk memory layer import".split()
open(sys.argv[1], "w").write(" ".join(random.choice(words) for _ in range(4000)) + "\n")
PY
"$STRATA_BIN" prepare --in "$work/text.txt" --out "$work/tokens.bin" 2>/dev/null

# first_loss NAME DIR [ARGS...]: the loss of the first step of a run imported from DIR.
first_loss() {
  local name=$1 dir=$2
  shift 2
  "$STRATA_BIN" train --init-from "$dir" --set "data.train=\"$work/tokens.bin\"" \
    --set train.batch_size=$B --set train.seq_len=$T --set train.steps=1 \
    --metrics "$work/$name.jsonl" --quiet "$@" 2>"$work/$name.log" ||
    fail "$name: $(cat "$work/$name.log")"
  /usr/bin/python3 -c 'import json, sys; print(repr(json.loads(open(sys.argv[1]).readline())["loss"]))' \
    "$work/$name.jsonl"
}

# torch_losses DIR STRATA_LOSS [DIR STRATA_LOSS ...]: PyTorch's loss of each DIR's weights on the
# first (B, T) batch of the token file, against Strata's (one torch import for all). The model
# comes from DIR/config.json (tools/torch_export_check.py: GPT-2 or Llama), its weights from the
# HF names alone; what HF's loader reads past is skipped. Fails naming every DIR that differs.
torch_losses() {
  /usr/bin/python3 - "$STRATA_SOURCE_DIR/tools" "$work/tokens.bin" $B $T "$@" <<'PY'
import os, struct, sys
sys.path.insert(0, sys.argv[1])
import torch
import make_hf_fixture as fx
import torch_export_check as tec

tokens_path, B, T = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.use_deterministic_algorithms(True)
torch.set_num_threads(2)


def torch_loss(model_dir):
    cfg, arch = tec.config_from_hf(os.path.join(model_dir, "config.json"))
    config, tensors = fx.read_model(model_dir)
    tied = config.get("tie_word_embeddings", config["model_type"] == "gpt2")
    params = {}
    for hf_name, value in tensors.items():
        name = hf_name.removeprefix("transformer.") if config["model_type"] == "gpt2" else hf_name
        if (name == "lm_head.weight" and tied) or name.endswith(
                (".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq")):
            continue  # HF ties the head to the embedding and rebuilds these buffers: it reads none
        strata_name, transposed = arch.strata_name(name)
        params[strata_name] = value.t().contiguous() if transposed else value
    model = arch.make(cfg)
    arch.module.load_params(model, params)
    data = open(tokens_path, "rb").read()
    n = struct.unpack("<256i", data[:1024])[2]
    tokens = torch.tensor(struct.unpack(f"<{n}H", data[1024:1024 + 2 * n]), dtype=torch.long)
    chunk = tokens[:B * T + 1]
    with torch.no_grad():
        _, loss = model(chunk[:-1].view(B, T), chunk[1:].view(B, T))
    return loss.item()


differ = []
for model_dir, strata in zip(sys.argv[5::2], map(float, sys.argv[6::2])):
    want = torch_loss(model_dir)
    rel = abs(want - strata) / abs(want)
    ok = rel <= 1e-5
    print(f"{'ok  ' if ok else 'FAILED'} {os.path.basename(model_dir)}: first loss {strata:.7f}, "
          f"PyTorch {want:.7f}, relative {rel:.2e} (limit 1e-05)")
    if not ok:
        differ.append(os.path.basename(model_dir))
if differ:
    sys.exit("the first loss differs from PyTorch's: " + ", ".join(differ))
PY
}

# Every fixture at once: one Python start and torch import instead of one per fixture.
/usr/bin/python3 "$STRATA_SOURCE_DIR/tools/make_hf_fixture.py" --each-line - <<FIXTURES ||
$work/gpt2_f32 --arch gpt2 --dtype f32 --ctx $T --seed 1
$work/gpt2_bf16 --arch gpt2 --dtype bf16 --ctx $T --shards 3 --prefix --buffers --lm-head --seed 2
$work/gpt2_f16 --arch gpt2 --dtype f16 --ctx $T --layers 3 --seed 3
$work/llama_f32 --arch llama --dtype f32 --ctx $T --heads 4 --kv-heads 2 --untied --shards 2 --buffers --seed 4
$work/llama_bf16_tied --arch llama --dtype bf16 --ctx $T --heads 4 --kv-heads 1 --tied --lm-head --rope-scaling --rope-theta 500000 --seed 5
$work/llama_f16 --arch llama --dtype f16 --ctx $T --layers 3 --heads 8 --kv-heads 2 --ffn 160 --seed 6
$work/llama31_shape --arch llama --dtype bf16 --ctx 131072 --original-ctx 8192 --vocab 128256 --layers 1 --embd 32 --heads 4 --kv-heads 2 --ffn 64 --untied --rope-scaling --rope-theta 500000 --seed 7
FIXTURES
  fail "writing the fixtures (they need Debian's python3-torch, /usr/bin/python3)"
losses=()
for name in gpt2_f32 gpt2_bf16 gpt2_f16 llama_f32 llama_bf16_tied llama_f16 llama31_shape; do
  loss=$(first_loss "$name" "$work/$name")
  losses+=("$work/$name" "$loss")
done
torch_losses "${losses[@]}" || fail "see above"

# Llama 3.1's shape trains and exports as it came: its context, scaling and vocabulary kept.
first_loss llama31_ck "$work/llama31_shape" --save-every 1 --checkpoint-dir "$work/llama31_ckpt" \
  >/dev/null
"$STRATA_BIN" export --checkpoint "$work/llama31_ckpt" --out "$work/llama31_export/" 2>/dev/null ||
  fail "llama31_shape: the export failed"
/usr/bin/python3 - "$work/llama31_shape/config.json" "$work/llama31_export/config.json" <<'PY' ||
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
keys = ["max_position_embeddings", "rope_scaling", "rope_theta", "vocab_size",
        "num_key_value_heads", "tie_word_embeddings", "bos_token_id", "eos_token_id",
        "torch_dtype"]
bad = [k for k in keys if a.get(k) != b.get(k)]
print(f"ok   llama31_shape: the export keeps {', '.join(keys)}" if not bad else f"differ: {bad}")
sys.exit(1 if bad else 0)
PY
  fail "llama31_shape: the export's config.json differs from the imported one"

# Import -> checkpoint -> export -> import. The learning rate must be positive; at 1e-30 the
# step changes no weight (every one is far above 2^24 times the step, |w| > 1e-22) and weight
# decay multiplies by 1 - 1e-31, which is 1 in f32: the checkpoint holds the imported weights.
round_trip() {
  local name=$1
  local first again
  first=$(first_loss "${name}_rt" "$work/$name" --set optim.lr=1e-30 --save-every 1 \
    --checkpoint-dir "$work/${name}_ckpt")
  "$STRATA_BIN" export --checkpoint "$work/${name}_ckpt" --out "$work/${name}_export/" 2>/dev/null
  /usr/bin/python3 - "$work/$name" "$work/${name}_export" <<'PY' ||
import json, os, struct, sys

def tensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header, base = json.loads(data[8:8 + n]), 8 + n
    return {name: (e["dtype"], e["shape"], data[base + e["data_offsets"][0]:base + e["data_offsets"][1]])
            for name, e in header.items() if name != "__metadata__"}

def model(d):  # a single file or shards, less the buffers HF's loader ignores
    index = os.path.join(d, "model.safetensors.index.json")
    files = (["model.safetensors"] if os.path.exists(os.path.join(d, "model.safetensors"))
             else sorted(set(json.load(open(index))["weight_map"].values())))
    out = {}
    for f in files:
        out.update(tensors(os.path.join(d, f)))
    return {k: v for k, v in out.items() if not k.endswith(".rotary_emb.inv_freq")}

original, exported = model(sys.argv[1]), model(sys.argv[2])
if original != exported:
    bad = sorted(k for k in original.keys() | exported.keys() if original.get(k) != exported.get(k))
    sys.exit(f"tensors differ: {bad[:5]}")
print(f"ok   {os.path.basename(sys.argv[1])}: the export holds the {len(original)} imported "
      f"tensors byte for byte")
PY
    fail "$name: the export does not hold the imported bytes"
  again=$(first_loss "${name}_again" "$work/${name}_export")
  [ "$first" = "$again" ] || fail "$name: imported from the export, the first loss is $again, not $first"
  echo "ok   $name: imported from the export, the first loss is $again, bit for bit"
}
round_trip gpt2_f32
round_trip llama_f32
echo "import_torch: ok"
