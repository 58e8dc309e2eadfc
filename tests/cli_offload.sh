#!/usr/bin/env bash
# CTest `cli_offload`: `strata train` on the offloaded schedules.
#  1. beyond host memory: a vertical run whose optimizer state is larger than its host budget
#     finishes, learns, keeps its pinned host memory within the budget, and its metrics show the
#     storage traffic and busy time per resource; --trace writes a Perfetto JSON of the last step
#     with one track per resource;
#  2. horizontal runs from the config too;
#  3. a plan that does not fit the device budget is refused before step 1, with the numbers;
#  4. a storage error mid-run stops training (exit 1) naming the tensor and the file, and the
#     success line never appears;
#  5. --trace without an offloaded schedule is a usage error;
#  6. --device cpu-discrete (compute reaches host memory only by copies) trains the vertical
#     schedule with offloaded activations to the CPU device's losses, bit for bit.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/cli_offload"
rm -rf "$work" && mkdir -p "$work/store"
# 8 blocks of 128 channels: 1.6M parameters, AdamW state (master, m, v) 19 MB.
model=(--set model.n_layer=8 --set model.n_embd=128 --set model.n_head=4
       --set model.context_length=64 --set train.seq_len=64 --set train.batch_size=4
       --set train.grad_accum=2 --set optim.warmup_steps=5
       --set "io.dirs=[\"$work/store\"]" --set offload.params_on_host=0
       --set offload.optim_on_host=0)
host_budget=$((17 * 1024 * 1024))

# 1. Beyond host memory.
"$STRATA_BIN" train "${model[@]}" --set train.schedule=vertical --set train.steps=40 \
  --set memory.host_bytes=$host_budget --metrics "$work/vertical.jsonl" \
  --trace "$work/trace.json" 2>"$work/vertical.log"
python3 - "$work/vertical.jsonl" "$work/trace.json" "$host_budget" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
trace = json.load(open(sys.argv[2]))
budget = int(sys.argv[3])
assert len(rows) == 40, f"{len(rows)} metrics lines, want 40"
for k in ("storage_read_bytes", "storage_write_bytes", "h2d_bytes", "d2h_bytes",
          "peak_device_bytes", "peak_host_bytes", "busy_s"):
    assert all(k in r for r in rows), f"metrics key {k} missing"
params = 8 * (12 * 128 * 128 + 13 * 128)
optim_state = 12 * params
assert optim_state > budget, f"test premise: optimizer state {optim_state} <= budget {budget}"
assert max(r["peak_host_bytes"] for r in rows) <= budget, "pinned host memory above the budget"
# From step 1 on every step reads and writes the optimizer state of every block.
for r in rows[1:]:
    assert r["storage_read_bytes"] >= optim_state, r["storage_read_bytes"]
    assert r["storage_write_bytes"] >= optim_state, r["storage_write_bytes"]
    assert set(r["busy_s"]) == {"compute", "h2d", "d2h", "storage_read", "storage_write",
                                "cpu_optim"}, r["busy_s"]
    assert r["busy_s"]["storage_read"] > 0 and r["busy_s"]["compute"] > 0
first, last = rows[0]["loss"], sum(r["loss"] for r in rows[-5:]) / 5
assert last < first - 1.0, f"loss did not fall: {first} -> {last}"
events = trace["traceEvents"]
tracks = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
assert {"compute", "storage_read", "storage_write", "cpu_optim", "h2d", "d2h"} <= tracks, tracks
names = [e["name"] for e in events if e["ph"] == "X"]
assert any(n.startswith("adamw blk.") for n in names) and any(n.startswith("bwd blk.") for n in names)
print(f"ok: vertical, optimizer state {optim_state} B > host budget {budget} B; "
      f"loss {first:.3f} -> {last:.3f}; {rows[-1]['storage_read_bytes']} B read per step")
PY
grep -q "trained 40 steps" "$work/vertical.log"
[ -z "$(ls -A "$work/store")" ] || { echo "store file left behind" >&2; exit 1; }

# 2. Horizontal, a few steps.
"$STRATA_BIN" train "${model[@]}" --set train.schedule=horizontal --set train.steps=3 \
  --metrics "$work/horizontal.jsonl" --quiet 2>"$work/horizontal.log"
[ "$(wc -l <"$work/horizontal.jsonl")" -eq 3 ]
grep -q "trained 3 steps" "$work/horizontal.log"

# 3. Refused before step 1 when the plan does not fit the device budget.
set +e
"$STRATA_BIN" train "${model[@]}" --set train.schedule=vertical --set memory.device_bytes=1000000 \
  --metrics "$work/refused.jsonl" 2>"$work/refused.log"
code=$?
set -e
[ "$code" -eq 2 ] || { echo "device budget: exit $code, want 2" >&2; exit 1; }
grep -q "vertical plan does not fit" "$work/refused.log"
grep -q "device" "$work/refused.log"
grep -q "memory.device_bytes" "$work/refused.log"
[ ! -s "$work/refused.jsonl" ] || { echo "a refused run wrote metrics" >&2; exit 1; }

# 4. A storage error mid-run.
set +e
"$STRATA_BIN" train "${model[@]}" --set train.schedule=vertical --set train.steps=10 \
  --set io.faults=read:30:eio 2>"$work/fault.log"
code=$?
set -e
[ "$code" -eq 1 ] || { echo "storage fault: exit $code, want 1" >&2; exit 1; }
grep -q "training stopped: io_error: step [1-9]" "$work/fault.log"
grep -q "reading tensor '" "$work/fault.log"
grep -q "$work/store/strata.store" "$work/fault.log"
if grep -q "trained" "$work/fault.log"; then echo "a failed run reported success" >&2; exit 1; fi

# 5. --trace needs an offloaded schedule.
set +e
"$STRATA_BIN" train --set train.steps=1 --trace "$work/none.json" 2>"$work/usage.log"
code=$?
set -e
[ "$code" -eq 2 ] && grep -q -- "--trace needs an offloaded schedule" "$work/usage.log"

# 6. The discrete CPU device gives the CPU device's bits (losses printed to 17 digits).
for device in cpu cpu-discrete; do
  "$STRATA_BIN" train "${model[@]}" --device "$device" --set train.schedule=vertical \
    --set train.steps=3 --set activations.policy=offload --metrics "$work/$device.jsonl" \
    2>"$work/$device.log"
done
python3 - "$work/cpu.jsonl" "$work/cpu-discrete.jsonl" <<'PY'
import json, sys
cpu, disc = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert len(cpu) == len(disc) == 3, (len(cpu), len(disc))
for a, b in zip(cpu, disc):
    assert (a["loss"], a["grad_norm"]) == (b["loss"], b["grad_norm"]), (a, b)
    assert b["acts_storage_write_bytes"] > 0, "activations were not offloaded"
PY
grep -q "device: cpu-discrete" "$work/cpu-discrete.log"
echo "ok: cli_offload"
