#!/usr/bin/env bash
# What data parallelism over MPI costs and buys on this machine (docs/design.md §12), side by
# side in one run, repeated and interleaved:
#   one  1 rank, M = 4 micro-batches per step, OpenMP over every core;
#   two  2 ranks (mpirun, shared memory), M = 2 each, one OpenMP thread per rank: the same
#        global batch, the cores split between processes instead of threads.
# The run: vertical schedule, a GPT of 4 x 256 (3.3M parameters, 13 MiB of f32 gradient per
# step), B 4, T 128, parameters, optimizer state and gradients on storage (each rank's own
# directory), 14 steps; figures are medians over steps 5..14 of rank 0's metrics, then medians
# over the repeats:
#   - iter_s and tokens/s (every rank's tokens) of each;
#   - net_busy_s: seconds per step the two-rank run's net queue was busy, and its share of the
#     step: the all-reduces, including the wait for the other rank to reach each one (a
#     collective starts when both have), so an upper bound on what moving the data costs;
#   - store_bytes per rank: each rank's store holds half of the blocks' working params (Note
#     [Sharded working params]), masters and moments (Note [Sharded optimizer state]) and kept
#     gradients, and the embed group's state whole, against the single rank's whole state;
#   - the checkpoint after the last step, at a standstill: its write_s (rank 0's metrics) and
#     the bytes of its state files: the single rank's three safetensors files against each
#     rank's rank-RRRRR.state (Note [Sharded checkpoints]: every rank writes its half at once);
#   - the final loss of each: the same up to the order of the gradient sums;
#   - the same pair with 12 blocks and their working params in host memory (one_host,
#     two_host): tokens/s, and each rank's planned host bytes (two ranks hold half of the params
#     each, plus the two stages a fetch gathers a block into).
# Last line: JSON.   usage: bench/data_parallel.sh [DIR] [REPEATS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
source scripts/mpi_env.sh  # mpi: the launch command
dir=${1:-$build_dir/bench-dp}
repeats=${2:-3}
# Stores of up to ~180 MiB and checkpoints of up to ~120 MiB per run; a run's store is removed
# when it ends, and the checkpoints of repeat 0 are kept for their sizes.
bench_scratch data_parallel "$dir" $((2 * 1024 * 1024))

args=(train --set model.n_layer=4 --set model.n_embd=256 --set model.n_head=4
      --set model.context_length=128 --set train.seq_len=128 --set train.batch_size=4
      --set train.steps=14 --set train.schedule=vertical --set offload.params_on_host=0
      --set offload.optim_on_host=0 --set offload.grads_on_host=0 --quiet --save-every 14)

for ((i = 0; i < repeats; i++)); do
  for kind in one two one_host two_host; do
    out="$dir/$kind.$i"
    mkdir -p "$out/s0" "$out/s1"
    # *_host: the working params of 12 blocks in host memory (Note [Sharded working params]:
    # two ranks hold half each, and gather a block into one of two stages at each fetch).
    place=()
    [[ $kind == *_host ]] && place=(--set offload.params_on_host=1 --set model.n_layer=12)
    if [[ $kind == one* ]]; then
      "$STRATA_BIN" "${args[@]}" "${place[@]}" --set train.grad_accum=4 \
        --set "io.dirs=[\"$out/s0\"]" \
        --checkpoint-dir "$out/ckpt" --metrics "$out/metrics.jsonl" 2>"$out/log"
    else
      "${mpi[@]}" -np 2 "$STRATA_BIN" "${args[@]}" "${place[@]}" \
        --set train.grad_accum=2 --set "io.dirs=[\"$out/s{rank}\"]" \
        --checkpoint-dir "$out/ckpt" --metrics "$out/metrics.jsonl" 2>"$out/log"
    fi
    rm -rf "$out/s0" "$out/s1"
    if [ "$i" -gt 0 ]; then rm -rf "$out/ckpt"; fi
  done
done

/usr/bin/python3 - "$dir" "$repeats" <<'PY'
import glob, json, os, statistics, sys
d, repeats = sys.argv[1], int(sys.argv[2])

def state_files(step_dir):
    names = sorted(glob.glob(step_dir + "/*.safetensors") + glob.glob(step_dir + "/rank-*.state"))
    return {os.path.basename(n): os.path.getsize(n) for n in names}

med = statistics.median
res = {}
for kind in ("one", "two", "one_host", "two_host"):
    iters, tps, net, store, loss, ckpt_s = [], [], [], [], [], []
    for i in range(repeats):
        rows = [json.loads(l) for l in open(f"{d}/{kind}.{i}/metrics.jsonl")]
        steady = rows[4:]
        iters.append(med(r["iter_s"] for r in steady))
        tps.append(med(r["tokens_per_s"] for r in steady))
        net.append(med(r["busy_s"].get("net", 0.0) for r in steady))
        store.append(rows[-1]["store_bytes"])
        loss.append(rows[-1]["loss"])
        ckpt_s.append(rows[-1]["checkpoints"][0]["write_s"])
    res[kind] = {"iter_s": round(med(iters), 4), "tokens_per_s": round(med(tps), 1),
                 "net_busy_s": round(med(net), 4), "store_bytes_per_rank": store[0],
                 "planned_host_bytes_per_rank": rows[-1]["planned_host_bytes"],
                 "final_loss": loss[0], "iter_s_runs": [round(x, 4) for x in iters],
                 "checkpoint_write_s": round(med(ckpt_s), 4),
                 "checkpoint_write_s_runs": [round(x, 4) for x in ckpt_s],
                 "checkpoint_files": state_files(f"{d}/{kind}.0/ckpt/step-00000014")}
two = res["two"]
res["two_over_one_tokens_per_s"] = round(two["tokens_per_s"] / res["one"]["tokens_per_s"], 3)
res["net_share_of_step"] = round(two["net_busy_s"] / two["iter_s"], 3)
res["store_per_rank_over_single"] = round(two["store_bytes_per_rank"] /
                                          res["one"]["store_bytes_per_rank"], 3)
res["checkpoint_write_two_over_one"] = round(two["checkpoint_write_s"] /
                                             res["one"]["checkpoint_write_s"], 3)
res["host_two_over_one_tokens_per_s"] = round(res["two_host"]["tokens_per_s"] /
                                              res["one_host"]["tokens_per_s"], 3)
res["host_planned_bytes_two_over_one"] = round(res["two_host"]["planned_host_bytes_per_rank"] /
                                               res["one_host"]["planned_host_bytes_per_rank"], 3)
for k in ("one", "two", "one_host", "two_host"):
    print(f"{k}: {res[k]['iter_s']} s/step, {res[k]['tokens_per_s']} tokens/s, "
          f"net {res[k]['net_busy_s']} s, checkpoint {res[k]['checkpoint_write_s']} s, "
          f"loss {res[k]['final_loss']:.5f}", file=sys.stderr)
print(json.dumps(res))
PY
