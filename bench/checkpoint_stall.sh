#!/usr/bin/env bash
# How long a checkpoint stalls training when the state lives on storage, against the time to copy
# that state at the storage engine's measured bandwidth, in one run.
#   The run: vertical schedule, parameters and optimizer state on storage, a GPT of ~21M
#   parameters (12 x 384), a checkpoint after every step. A checkpoint reads every block's master
#   weights and AdamW moments from the store (12 bytes per parameter, O_DIRECT) and writes them
#   as safetensors (12 bytes per parameter), then fsyncs. The ideal: those bytes at the engine's
#   sequential read bandwidth plus at its write bandwidth, measured by `strata bench-io` on the
#   same directory just before (the copy is done slab by slab, read then write, so the two add).
# Last line: JSON with stall_s_median, ideal_copy_s, stall_over_ideal.
#   usage: bench/checkpoint_stall.sh [DIR] [STEPS=4]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${STRATA_BUILD_DIR:-build}
bin=${STRATA_BIN:-$build_dir/strata}
dir=${1:-$build_dir/bench-ckpt}
steps=${2:-4}
rm -rf "$dir" && mkdir -p "$dir/store" "$dir/ckpt" "$dir/io"
trap 'rm -rf "$dir"' EXIT

"$bin" bench-io --dir "$dir/io" --size 512M --op write >"$dir/write.txt" 2>/dev/null
"$bin" bench-io --dir "$dir/io" --size 512M --op read >"$dir/read.txt" 2>/dev/null
rm -rf "$dir/io"

"$bin" train --set model.n_layer=12 --set model.n_embd=384 --set model.n_head=6 \
  --set model.context_length=64 --set train.seq_len=64 --set train.batch_size=1 \
  --set train.grad_accum=1 --set train.steps="$steps" --set train.schedule=vertical \
  --set offload.params_on_host=0 --set offload.optim_on_host=0 \
  --set "io.dirs=[\"$dir/store\"]" --save-every 1 --keep 1 --checkpoint-dir "$dir/ckpt" \
  --metrics "$dir/metrics.jsonl" --quiet 2>"$dir/train.log"

/usr/bin/python3 - "$dir" <<'PY'
import json, statistics, sys
d = sys.argv[1]
read = json.loads(open(f"{d}/read.txt").read().strip().splitlines()[-1])
write = json.loads(open(f"{d}/write.txt").read().strip().splitlines()[-1])
rows = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
stalls = [r["checkpoint_stall_s"] for r in rows if "checkpoint_stall_s" in r]
manifest = json.load(open(f"{d}/ckpt/" + sorted(__import__("os").listdir(f"{d}/ckpt"))[-1] +
                          "/manifest.json"))
ckpt_bytes = sum(f["bytes"] for f in manifest["files"])
# The state read back from the store: master, m, v of every block (the embedding group's state
# is on host), 12 bytes per parameter; the files written are the checkpoint itself.
ideal = ckpt_bytes / (read["gb_per_s"] * 1e9) + ckpt_bytes / (write["gb_per_s"] * 1e9)
med = statistics.median(stalls)
print(f"engine: read {read['gb_per_s']:.3f} GB/s, write {write['gb_per_s']:.3f} GB/s "
      f"(strata bench-io, 1 MiB blocks, depth 32, O_DIRECT)")
print(f"checkpoint: {ckpt_bytes / 1e6:.1f} MB; stalls {', '.join(f'{s:.3f}' for s in stalls)} s")
print(f"ideal copy (read + write at those rates): {ideal:.3f} s; median stall {med:.3f} s "
      f"= {med / ideal:.2f}x ideal")
print(json.dumps({"stall_s_median": round(med, 4), "stalls_s": [round(s, 4) for s in stalls],
                  "ideal_copy_s": round(ideal, 4), "stall_over_ideal": round(med / ideal, 3),
                  "checkpoint_bytes": ckpt_bytes, "read_gb_s": round(read["gb_per_s"], 3),
                  "write_gb_s": round(write["gb_per_s"], 3)}))
PY
