#!/usr/bin/env bash
# CTest `export_torch`: a checkpoint written by `strata train`, exported with `strata export`,
# loads by its Hugging Face names into PyTorch's GPT-2 (tools/torch_gpt2.py) and gives Strata's
# logits; the export carries the checkpoint's weights bit for bit (tests/parity/export_logits);
# a sharded export (--shard-size) holds the same tensors, each once, as its index says (plain
# safetensors parsing: transformers is not needed); a corrupted checkpoint is refused with exit
# status 2 and one line naming the file.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_SOURCE_DIR:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/export_torch"
rm -rf "$work" && mkdir -p "$work"
small=(--set model.n_layer=2 --set model.n_embd=64 --set model.context_length=64
       --set train.seq_len=64 --set train.batch_size=4)

"$STRATA_BIN" train "${small[@]}" --set train.steps=4 --save-every 4 \
  --checkpoint-dir "$work/ckpt" --quiet
ckpt="$work/ckpt/step-00000004"
[ -f "$ckpt/manifest.json" ] || { echo "export_torch: FAILED: no checkpoint at $ckpt" >&2; exit 1; }

"$STRATA_BIN" export --checkpoint "$ckpt" --out "$work/export/model.safetensors" 2>"$work/export.log"
cat "$work/export.log"
[ -f "$work/export/config.json" ] || { echo "export_torch: FAILED: no config.json beside the export" >&2; exit 1; }

"$STRATA_BINARY_DIR/tests/export_logits" --checkpoint "$ckpt" \
  --exported "$work/export/model.safetensors" --out "$work/logits.safetensors"

# Sharded into a directory: shards and index beside HF's config.json, the same tensors and bytes.
"$STRATA_BIN" export --checkpoint "$ckpt" --out "$work/sharded/" --shard-size 150KB \
  2>"$work/export_sharded.log"
cat "$work/export_sharded.log"
[ -f "$work/sharded/config.json" ] ||
  { echo "export_torch: FAILED: no config.json beside the shards" >&2; exit 1; }
python3 - "$work/export/model.safetensors" "$work/sharded" 150000 <<'PY'
import json, os, struct, sys

def tensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header, base = json.loads(data[8:8 + n]), 8 + n
    return {name: (e["dtype"], e["shape"],
                   data[base + e["data_offsets"][0]:base + e["data_offsets"][1]])
            for name, e in header.items() if name != "__metadata__"}

def fail(why):
    sys.exit(f"export_torch: FAILED sharded export: {why}")

whole, out, limit = tensors(sys.argv[1]), sys.argv[2], int(sys.argv[3])
index = json.load(open(os.path.join(out, "model.safetensors.index.json")))
shards = sorted(f for f in os.listdir(out)
                if f.startswith("model-") and f.endswith(".safetensors"))
want = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
if len(shards) < 2 or shards != want:
    fail(f"shard names {shards}")
if os.path.exists(os.path.join(out, "model.safetensors")):
    fail("an unsharded model.safetensors beside the index")
seen = {}
for shard in shards:
    got = tensors(os.path.join(out, shard))
    if sum(len(t[2]) for t in got.values()) > limit and len(got) > 1:
        fail(f"{shard} holds more than {limit} bytes of tensors")
    for name, t in got.items():
        if name in seen:
            fail(f"{name} in {seen[name]} and {shard}")
        seen[name] = shard
        if whole.get(name) != t:
            fail(f"{name} in {shard} differs from the unsharded export")
if seen != index["weight_map"] or set(seen) != set(whole):
    fail("the index's weight_map does not list every tensor once with its shard")
if index["metadata"]["total_size"] != sum(len(t[2]) for t in whole.values()):
    fail("total_size is not the bytes of all tensors")
print(f"ok   sharded: {len(shards)} shards hold the {len(whole)} tensors of the unsharded export")
PY

# expect_refused NAME PATTERN ARGS...: `strata` exits 2 with one stderr line matching PATTERN.
expect_refused() {
  local name=$1 pattern=$2
  shift 2
  local err status=0
  err=$("$STRATA_BIN" "$@" 2>&1 >/dev/null) || status=$?
  if [ "$status" -ne 2 ] || [ "$(printf '%s\n' "$err" | grep -c .)" -ne 1 ] ||
    ! grep -qE -- "$pattern" <<<"$err"; then
    echo "export_torch: FAILED $name: status $status, wanted 2 and /$pattern/; got: $err" >&2
    exit 1
  fi
  echo "ok   $name: $err"
}

# One flipped bit in the middle of the weights: still a well-formed safetensors file, so only
# the manifest's CRC32C can tell.
cp -r "$ckpt" "$work/corrupt"
python3 - "$work/corrupt/model.safetensors" <<'PY'
import sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
data[len(data) // 2] ^= 0x10
open(path, "wb").write(data)
PY
expect_refused corrupt_model 'model\.safetensors' export --checkpoint "$work/corrupt" \
  --out "$work/corrupt_export/model.safetensors"
[ ! -e "$work/corrupt_export/model.safetensors" ] ||
  { echo "export_torch: FAILED: a corrupt checkpoint was exported" >&2; exit 1; }
expect_refused missing_checkpoint 'nope' export --checkpoint "$work/nope" --out "$work/x.safetensors"
expect_refused missing_out '--out' export --checkpoint "$ckpt"
expect_refused bad_shard_size 'shard-size' export --checkpoint "$ckpt" --out "$work/x/" \
  --shard-size 2XB

if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "export_torch: FAILED: the PyTorch check needs Debian's python3-torch (/usr/bin/python3)" >&2
  exit 1
fi
/usr/bin/python3 "$STRATA_SOURCE_DIR/tools/torch_export_check.py" \
  "$work/export/model.safetensors" "$work/logits.safetensors"
