#!/usr/bin/env bash
# CTest `cli_host_budget`: checkpoints stay inside memory.host_bytes (Note [Host memory beside
# the plan] in src/train/offload_snapshot.cpp). A vertical run with its optimizer state on storage
# saves every 2 of 4 steps:
#  1. unbounded: planned_host_bytes counts the snapshot stage, and peak_host_bytes never exceeds
#     it (before, a save behind training took 2.4 MB more than the plan said);
#  2. a budget one byte short of that: the run says checkpoints are written at a standstill, its
#     peak stays within the budget, and its checkpoints are byte for byte the unbounded run's;
#  3. a budget one byte short of what a step needs: one line naming memory.host_bytes, exit 2,
#     no store left behind.
set -uo pipefail
: "${STRATA_BIN:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/cli_host_budget"
rm -rf "$work" && mkdir -p "$work/store"
fail() { echo "cli_host_budget: $*" >&2; exit 1; }
args=(--set model.n_layer=2 --set model.n_embd=64 --set model.n_head=4 --set model.vocab_size=512
      --set model.context_length=32 --set train.seq_len=32 --set train.batch_size=2
      --set train.grad_accum=2 --set train.steps=4 --set train.schedule=vertical
      --set offload.params_on_host=0 --set offload.optim_on_host=0 --set offload.grads_on_host=0
      --set "io.dirs=[\"$work/store\"]" --save-every 2 --keep 0)
# run NAME BUDGET: trains with memory.host_bytes=BUDGET; prints "planned peak" of the metrics'
# largest figures; its log is $work/NAME.log.
run() {
  "$STRATA_BIN" train "${args[@]}" --set "memory.host_bytes=$2" --checkpoint-dir "$work/$1" \
    --metrics "$work/$1.jsonl" 2>"$work/$1.log" || fail "run $1 failed: $(tail -3 "$work/$1.log")"
  /usr/bin/python3 - "$work/$1.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
print(max(l["planned_host_bytes"] for l in lines), max(l["peak_host_bytes"] for l in lines))
PY
}

read -r planned peak < <(run free 0)
[ "$peak" -le "$planned" ] || fail "unbounded: peak_host_bytes $peak > planned_host_bytes $planned"
grep -q "s behind training" "$work/free.log" || fail "unbounded: no checkpoint was written behind training"

budget=$((planned - 1))
read -r planned2 peak2 < <(run tight "$budget")
[ "$peak2" -le "$budget" ] || fail "budget $budget: peak_host_bytes $peak2 exceeds it"
[ "$planned2" -le "$budget" ] || fail "budget $budget: planned_host_bytes $planned2 exceeds it"
grep -q "checkpoints are written at a standstill: memory.host_bytes $budget is below the $planned" \
  "$work/tight.log" ||
  fail "budget $budget: no line says checkpoints are written at a standstill"
! grep -q "s behind training" "$work/tight.log" || fail "budget $budget: a checkpoint went behind"
for step in 00000002 00000004; do
  for f in model.safetensors exp_avg.safetensors exp_avg_sq.safetensors; do
    cmp -s "$work/free/step-$step/$f" "$work/tight/step-$step/$f" ||
      fail "step-$step/$f differs between the unbounded and the tight run"
  done
done

short=$((planned2 - 1))
"$STRATA_BIN" train "${args[@]}" --set "memory.host_bytes=$short" --checkpoint-dir "$work/short" \
  2>"$work/short.log"
code=$?
[ "$code" -eq 2 ] || fail "budget $short: exit $code, expected 2: $(cat "$work/short.log")"
grep -q "strata: error: .*memory.host_bytes" "$work/short.log" ||
  fail "budget $short: the error does not name memory.host_bytes: $(cat "$work/short.log")"
[ "$(grep -c "strata: error" "$work/short.log")" -eq 1 ] || fail "budget $short: more than one error line"
[ -z "$(ls -A "$work/store")" ] || fail "budget $short: left $(ls -A "$work/store")"
echo "ok: peak $peak <= planned $planned; budget $budget: standstill saves, same bytes, peak $peak2;" \
  "budget $short refused"
