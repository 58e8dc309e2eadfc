#!/usr/bin/env bash
# Where the in-memory schedule's ranks sum their gradients (Note [Collectives on device memory] in
# src/dist/device_collectives.h), side by side in one run, on two ranks (mpirun, shared memory,
# one OpenMP thread each): collectives "host" (the gradient copied out of device memory,
# MPI_Alltoallv + MPI_Allgatherv on host memory, copied back) against "device" (MPI
# point-to-point moves straight between the device buffers, the adds on the device), on the CPU
# device and on the discrete one (whose copies are real copies, as on a GPU). On a GPU the device
# transport is NCCL; this machine has none, so what is measured here is the mechanism's cost on
# the CPU devices, not NCCL's.
#  1. The sum alone (bench/bench_collectives.cpp): 13 MiB (the model below) and 128 MiB of f32,
#     20 times each, interleaved, the ranks lined up before each timing; medians of rank 0's
#     seconds, and whether both ways gave the same bits.
#  2. Training: a GPT of 4 x 256 (3.3M parameters, 13 MiB of f32 gradient), B 4, T 128, M 2 per
#     rank, 14 steps, each way on each device, repeated and interleaved; per run the medians over
#     steps 5..14 of rank 0's iter_s, tokens/s and grad_sum_s (the step's seconds in the sum,
#     waiting for the other rank included, which on these 2 cores is most of it), then medians
#     over the repeats; and whether every run ends with the same loss, bit for bit (it must).
#  3. The offloaded schedules (the same model, on cpu-discrete): vertical with the state on
#     storage, horizontal with it in host memory (as ZeRO-Infinity keeps it). With "device" the
#     collectives run in device memory and only each rank's shards cross between host and
#     device (Note [ZeRO-3 on the device] in src/sched/schedule_spec.h); with "host" whole
#     blocks cross and the host sums and gathers. Tokens/s, the net queue's busy seconds per step
#     (sum_s; waits for the other rank included), the h2d and d2h bytes per step, and the same
#     final loss both ways.
# Last line: JSON.   usage: bench/collectives.sh [DIR] [REPEATS=5]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
source scripts/mpi_env.sh  # mpi: the launch command
dir=${1:-$build_dir/bench-collectives}
repeats=${2:-5}
# Metrics, and the vertical runs' stores (~40 MiB per rank).
bench_scratch collectives "$dir" $((256 * 1024))

cmake --build "$build_dir" --target bench_collectives >/dev/null
for device in cpu cpu-discrete; do
  "${mpi[@]}" -np 2 "$build_dir/bench/bench_collectives" "$device" 20 13 128 >"$dir/sum-$device.json"
done

args=(train --set model.n_layer=4 --set model.n_embd=256 --set model.n_head=4
      --set model.context_length=128 --set train.seq_len=128 --set train.batch_size=4
      --set train.grad_accum=2 --set train.steps=14 --set train.schedule=in_memory --quiet)
kinds=(host-cpu device-cpu host-cpu-discrete device-cpu-discrete)
# The offloaded schedules on cpu-discrete: vertical with its state on storage (each rank's own
# directory), horizontal with it in host memory.
declare -A offloaded=(
  [vertical]="--set train.schedule=vertical --set device=cpu-discrete --set offload.params_on_host=0
              --set offload.optim_on_host=0 --set offload.grads_on_host=0"
  [horizontal]="--set train.schedule=horizontal --set device=cpu-discrete
                --set offload.params_on_host=1 --set offload.optim_on_host=1
                --set offload.grads_on_host=1 --set offload.checkpoints_on_host=1")
for ((i = 0; i < repeats; i++)); do
  for kind in "${kinds[@]}"; do
    place=${kind%%-*} device=${kind#*-}
    "${mpi[@]}" -np 2 "$STRATA_BIN" "${args[@]}" \
      --set "device=$device" --set "collectives=$place" \
      --metrics "$dir/$kind.$i.jsonl" 2>"$dir/$kind.$i.log"
  done
  for sched in vertical horizontal; do
    read -ra sched_args <<<"${offloaded[$sched]}"
    for place in host device; do
      mkdir -p "$dir/store0" "$dir/store1"
      "${mpi[@]}" -np 2 "$STRATA_BIN" "${args[@]}" "${sched_args[@]}" --set "collectives=$place" \
        --set "io.dirs=[\"$dir/store{rank}\"]" \
        --metrics "$dir/$place-$sched.$i.jsonl" 2>"$dir/$place-$sched.$i.log"
      rm -rf "$dir/store0" "$dir/store1"
    done
  done
done

/usr/bin/python3 - "$dir" "$repeats" "$bench_load" "${kinds[@]}" <<'PY'
import json, statistics, sys
d, repeats, load, kinds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
med = statistics.median
res = {"load_at_start": load, "repeats": repeats}
for device in ("cpu", "cpu-discrete"):
    res["sum_alone_" + device] = json.loads(open(f"{d}/sum-{device}.json").read())["sizes"]

def runs(kind, sum_key):
    iters, tps, sums, losses, link = [], [], [], set(), {}
    for i in range(repeats):
        rows = [json.loads(l) for l in open(f"{d}/{kind}.{i}.jsonl")]
        steady = rows[4:]
        iters.append(med(r["iter_s"] for r in steady))
        tps.append(med(r["tokens_per_s"] for r in steady))
        sums.append(med(sum_key(r) for r in steady))
        losses.add(repr(rows[-1]["loss"]))
        for k in ("h2d_bytes", "d2h_bytes"):  # the offloaded schedules' (their plans say)
            if k in rows[-1]:
                link[k] = rows[-1][k]
    return {"iter_s": round(med(iters), 4), "tokens_per_s": round(med(tps), 1),
            "sum_s": round(med(sums), 5), "sum_s_runs": [round(x, 5) for x in sums],
            "final_loss": sorted(losses), **link}

for kind in kinds:  # sum_s: grad_sum_s, the in-memory step's seconds summing
    res[kind] = runs(kind, lambda r: r["grad_sum_s"])
offloaded = [p + "-" + s for s in ("vertical", "horizontal") for p in ("host", "device")]
for kind in offloaded:  # sum_s: the net queue's busy seconds
    res[kind] = runs(kind, lambda r: r["busy_s"]["net"])
for case in ("cpu", "cpu-discrete", "vertical", "horizontal"):
    h = res["host-" + case]
    v = res["device-" + case]
    res[case + "_sum_s_device_over_host"] = round(v["sum_s"] / h["sum_s"], 3)
    res[case + "_tokens_per_s_device_over_host"] = round(v["tokens_per_s"] / h["tokens_per_s"], 3)
    for k in ("h2d_bytes", "d2h_bytes"):
        if k in h:
            res[f"{case}_{k}_device_over_host"] = round(v[k] / h[k], 3)
in_memory_losses = set().union(*(res[k]["final_loss"] for k in kinds))
same = [len(in_memory_losses) == 1]
for sched in ("vertical", "horizontal"):
    same.append(len(set(res["host-" + sched]["final_loss"]) | set(res["device-" + sched]["final_loss"])) == 1)
res["same_final_loss_everywhere"] = all(same)
for device in ("cpu", "cpu-discrete"):
    for size in res["sum_alone_" + device]:
        print(f"sum alone, {device}, {size['mib']} MiB: host {size['host_s']} s, "
              f"device {size['device_s']} s ({size['device_over_host']})", file=sys.stderr)
for kind in kinds + offloaded:
    link = "".join(f", {k} {res[kind][k]}" for k in ("h2d_bytes", "d2h_bytes") if k in res[kind])
    print(f"{kind}: {res[kind]['iter_s']} s/step, {res[kind]['tokens_per_s']} tokens/s, "
          f"sum {res[kind]['sum_s']} s{link}", file=sys.stderr)
print(json.dumps(res))
sys.exit(0 if res["same_final_loss_everywhere"] else 1)
PY
