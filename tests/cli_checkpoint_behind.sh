#!/usr/bin/env bash
# CTest `cli_checkpoint_behind`: checkpoints written behind training (Note [Asynchronous
# checkpoints] in model/state_snapshot.h).
#  1. An offloaded vertical run with its state on storage, saving every 2 of 6 steps, writes
#     checkpoints whose files are byte for byte those of the same run saving at a standstill
#     (--save-sync), trainer_state.json alike but for the run ids (config.json differs: the
#     store directories); its metrics say steps 2 and 4 were written behind training and the
#     last one (step 6) at a standstill.
#  2. A save that fails behind training (ENOSPC injected into the checkpoint's writes) stops the
#     run at the next step boundary with exit status 1 (a failure while running, Note [Exit
#     status] in src/cli/commands.h), naming the checkpoint, and publishes
#     nothing and leaves no temporary directory.
set -uo pipefail
: "${STRATA_BIN:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/cli_checkpoint_behind"
rm -rf "$work" && mkdir -p "$work/store_a" "$work/store_b"
fail() { echo "cli_checkpoint_behind: $*" >&2; exit 1; }
model=(--set model.n_layer=3 --set model.n_embd=64 --set model.n_head=4 --set model.vocab_size=512
       --set model.context_length=32 --set train.seq_len=32 --set train.batch_size=2
       --set train.grad_accum=3 --set train.steps=6 --set train.schedule=vertical)
storage=(--set offload.params_on_host=0 --set offload.optim_on_host=0
         --set offload.embed_optim_on_host=false)

"$STRATA_BIN" train "${model[@]}" "${storage[@]}" --set "io.dirs=[\"$work/store_a\"]" \
  --save-every 2 --keep 0 --checkpoint-dir "$work/behind" --metrics "$work/behind.jsonl" \
  --quiet 2>"$work/behind.log" || fail "the run behind failed: $(cat "$work/behind.log")"
"$STRATA_BIN" train "${model[@]}" "${storage[@]}" --set "io.dirs=[\"$work/store_b\"]" \
  --save-every 2 --keep 0 --checkpoint-dir "$work/sync" --save-sync --quiet \
  2>"$work/sync.log" || fail "the standstill run failed: $(cat "$work/sync.log")"
for step in 00000002 00000004 00000006; do
  for f in model.safetensors exp_avg.safetensors exp_avg_sq.safetensors; do
    cmp -s "$work/behind/step-$step/$f" "$work/sync/step-$step/$f" ||
      fail "step-$step/$f differs between the checkpoint behind training and at a standstill"
  done
  /usr/bin/python3 - "$work/behind/step-$step" "$work/sync/step-$step" <<'PY' || fail "step-$step/trainer_state.json differs"
import json, sys
a, b = (json.load(open(d + "/trainer_state.json")) for d in sys.argv[1:])
for s in (a, b):
    s.pop("run_id"); s.pop("lineage")
sys.exit(0 if a == b else 1)
PY
done
/usr/bin/python3 - "$work/behind.jsonl" <<'PY' || fail "the metrics do not say how each checkpoint was written"
import json, sys
seen = {c["step"]: c["behind"] for line in open(sys.argv[1])
        for c in json.loads(line).get("checkpoints", [])}
sys.exit(0 if seen == {2: True, 4: True, 6: False} else 1)
PY

# 2. A failed save behind training: state on host, so only the checkpoint's writes see the fault.
host=(--set offload.params_on_host=1 --set offload.optim_on_host=1 --set offload.grads_on_host=1
      --set offload.checkpoints_on_host=1)
"$STRATA_BIN" train "${model[@]}" "${host[@]}" --set io.faults=write:5:enospc --save-every 2 \
  --checkpoint-dir "$work/full" --quiet 2>"$work/full.log"
code=$?
[ "$code" -eq 1 ] || fail "a failed save behind training exited $code, expected 1: $(cat "$work/full.log")"
grep -q "strata: error: training stopped: .*checkpoint $work/full/step-00000002 not written" \
  "$work/full.log" || fail "the error does not name the checkpoint: $(cat "$work/full.log")"
[ -z "$(ls -A "$work/full" | grep -vx .lock)" ] || fail "left $(ls -A "$work/full")"
echo "ok: checkpoints behind training equal those at a standstill; a failed one exits 1, leaves nothing"
