#!/usr/bin/env bash
# CTest `cli_checkpoint_full_disk`: a full disk under a checkpoint (ENOSPC injected into the
# checkpoint's writes by io.faults) stops training with exit status 1, a failure while running
# (Note [Exit status] in src/cli/commands.h: 2 is a full disk found before training starts),
# naming the checkpoint; it publishes no step directory and leaves no temporary one
# (hidden files: the run's .lock stays, Note [Checkpoint lineage]).
set -uo pipefail
: "${STRATA_BIN:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/cli_checkpoint_full_disk"
rm -rf "$work" && mkdir -p "$work"
"$STRATA_BIN" train --set train.steps=2 --set model.n_layer=1 --set model.n_embd=64 \
  --set io.faults=write:5:enospc --save-every 1 --checkpoint-dir "$work/ckpt" --quiet \
  2>"$work/log"
code=$?
fail() { echo "cli_checkpoint_full_disk: $*; log: $(cat "$work/log")" >&2; exit 1; }
[ "$code" -eq 1 ] || fail "exit status $code, expected 1"
grep -q "strata: error: training stopped: .*checkpoint $work/ckpt/step-00000001 not written" \
  "$work/log" || fail "the error does not name the checkpoint"
[ -z "$(ls -A "$work/ckpt" | grep -vx .lock)" ] || fail "left $(ls -A "$work/ckpt")"
echo "ok: exit 1, the checkpoint named, nothing left in $work/ckpt"
