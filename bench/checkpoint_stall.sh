#!/usr/bin/env bash
# How long a checkpoint stops training, written behind training (Note [Asynchronous checkpoints]
# in model/state_snapshot.h) and at a standstill (--save-sync), against the time to copy the
# state at the storage engine's measured bandwidth; side by side in one run, repeated.
#   The run: vertical schedule, every block's parameters and optimizer state and the embedding
#   group's state on storage, a GPT of ~21M parameters (12 x 384), B 4, T 64, M micro-batches,
#   8 steps, a checkpoint every 2 steps. A checkpoint reads every slab's master weights and AdamW
#   moments from the store (O_DIRECT) and writes them as safetensors, then fsyncs.
#   Three runs per repeat, interleaved: behind training (the default), --save-sync, and no
#   checkpoints. The last step's checkpoint is written at a standstill in both modes (nothing
#   follows to hide it behind), so the figures are over the checkpoints of steps 2, 4 and 6:
#    - stall: what strata reports per checkpoint (metrics "checkpoints"): the time training
#      stood still for it (the boundary, the trainer's waits for slabs not yet captured, and
#      waiting for a save still running when the next is due);
#    - cost: the run's extra wall time over the run without checkpoints, per checkpoint, the
#      last one's stall taken out: the stall plus whatever training slowed down by sharing the
#      disk with the save.
#   The ideal: the checkpoint's bytes at the engine's sequential read bandwidth plus at its write
#   bandwidth, measured by `strata bench-io` on the same directory just before.
# Last line: JSON with the medians and stall_over_ideal (the goal: at most 0.2).
#   usage: bench/checkpoint_stall.sh [DIR] [REPEATS=3] [MICRO_BATCHES=4]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
dir=${1:-$build_dir/bench-ckpt}
repeats=${2:-3}
micro_batches=${3:-4}
# The 512 MiB probe, a store, two checkpoints and a margin.
bench_scratch checkpoint_stall "$dir" $((3 * 1024 * 1024))
mkdir -p "$dir/io"

"$STRATA_BIN" bench-io --dir "$dir/io" --size 512M --op write >"$dir/write.txt" 2>/dev/null
"$STRATA_BIN" bench-io --dir "$dir/io" --size 512M --op read >"$dir/read.txt" 2>/dev/null
rm -rf "$dir/io"

run() {  # run NAME [flags...]: one training run; its metrics in $dir/NAME.jsonl, log NAME.log
  local name=$1
  shift
  rm -rf "$dir/store" "$dir/ckpt" && mkdir -p "$dir/store"
  "$STRATA_BIN" train --set model.n_layer=12 --set model.n_embd=384 --set model.n_head=6 \
    --set model.context_length=64 --set train.seq_len=64 --set train.batch_size=4 \
    --set train.grad_accum="$micro_batches" --set train.steps=8 --set train.schedule=vertical \
    --set offload.params_on_host=0 --set offload.optim_on_host=0 \
    --set offload.embed_optim_on_host=false --set "io.dirs=[\"$dir/store\"]" \
    --metrics "$dir/$name.jsonl" "$@" 2>"$dir/$name.log"
}
for r in $(seq 1 "$repeats"); do
  run "behind.$r" --save-every 2 --keep 1 --checkpoint-dir "$dir/ckpt"
  cp "$(ls -d "$dir"/ckpt/step-* | tail -1)/manifest.json" "$dir/manifest.json"
  run "sync.$r" --save-every 2 --keep 1 --checkpoint-dir "$dir/ckpt" --save-sync
  run "none.$r"
done

/usr/bin/python3 - "$dir" "$repeats" "$micro_batches" <<'PY'
import json, re, statistics, sys
d, repeats = sys.argv[1], int(sys.argv[2])
read = json.loads(open(f"{d}/read.txt").read().strip().splitlines()[-1])
write = json.loads(open(f"{d}/write.txt").read().strip().splitlines()[-1])
ckpt_bytes = sum(f["bytes"] for f in json.load(open(f"{d}/manifest.json"))["files"])
ideal = ckpt_bytes / (read["gb_per_s"] * 1e9) + ckpt_bytes / (write["gb_per_s"] * 1e9)

def loop_seconds(name):  # the training loop, checkpoints included ("trained N steps in X s")
    m = re.search(r"trained \d+ steps in ([0-9.]+) s", open(f"{d}/{name}.log").read())
    return float(m.group(1))

def checkpoints(name):
    return [c for line in open(f"{d}/{name}.jsonl") for c in json.loads(line).get("checkpoints", [])]

stalls = {"behind": [], "sync": []}
costs = {"behind": [], "sync": []}
for r in range(1, repeats + 1):
    none = loop_seconds(f"none.{r}")
    for mode in ("behind", "sync"):
        cs = checkpoints(f"{mode}.{r}")
        inner = [c for c in cs if c["step"] < 8]
        last = [c for c in cs if c["step"] == 8][0]
        assert all(c["behind"] == (mode == "behind") for c in inner), cs
        stalls[mode] += [c["stall_s"] for c in inner]
        costs[mode].append((loop_seconds(f"{mode}.{r}") - last["stall_s"] - none) / len(inner))
med = {k: statistics.median(v) for k, v in stalls.items()}
cost = {k: statistics.median(v) for k, v in costs.items()}
print(f"engine: read {read['gb_per_s']:.3f} GB/s, write {write['gb_per_s']:.3f} GB/s "
      f"(strata bench-io, 1 MiB blocks, depth 32, O_DIRECT)")
print(f"checkpoint: {ckpt_bytes / 1e6:.1f} MB; ideal copy (read + write at those rates) {ideal:.3f} s")
for mode in ("none", "behind", "sync"):
    loops = [loop_seconds(mode + "." + str(r)) for r in range(1, repeats + 1)]
    print(f"{mode:>6}: training loop {', '.join(f'{x:.2f}' for x in loops)} s")
for mode in ("behind", "sync"):
    print(f"{mode:>6}: stall per checkpoint median {med[mode]:.4f} s = {med[mode] / ideal:.3f}x ideal "
          f"(all: {', '.join(f'{s:.3f}' for s in stalls[mode])}); cost per checkpoint median "
          f"{cost[mode]:.3f} s = {cost[mode] / ideal:.2f}x ideal (all: "
          f"{', '.join(f'{c:.2f}' for c in costs[mode])})")
print(json.dumps({
    "micro_batches": int(sys.argv[3]), "repeats": repeats, "checkpoint_bytes": ckpt_bytes,
    "read_gb_s": round(read["gb_per_s"], 3), "write_gb_s": round(write["gb_per_s"], 3),
    "ideal_copy_s": round(ideal, 4),
    "behind_stall_s_median": round(med["behind"], 4), "sync_stall_s_median": round(med["sync"], 4),
    "stall_over_ideal": round(med["behind"] / ideal, 4),
    "sync_stall_over_ideal": round(med["sync"] / ideal, 3),
    "behind_cost_s_median": round(cost["behind"], 3), "sync_cost_s_median": round(cost["sync"], 3),
    "behind_cost_over_ideal": round(cost["behind"] / ideal, 3),
    "sync_cost_over_ideal": round(cost["sync"] / ideal, 3)}))
PY
