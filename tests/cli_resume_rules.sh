#!/usr/bin/env bash
# CTest `cli_resume_rules`: what `strata train --resume` refuses and what it says (Note [Resuming
# with changed fields] in src/core/config.h). Once, a checkpoint at or past train.steps "trained"
# 0 steps and exited 0 ("loss 0.0000 -> 0.0000"); another batch size, sequence length, learning
# rate or precision was taken without a word; and a checkpoint directory renamed to another
# step resumed at the step its manifest said. Now: the first is one line and exit 2; every
# changed field is logged old -> new; a change that makes the resumed steps read other tokens
# (batch, sequence length, micro-batches per step, data) is refused unless --allow-changes names
# it; a step directory whose name, manifest and trainer state disagree is refused.
set -uo pipefail
: "${STRATA_BIN:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/cli_resume_rules"
rm -rf "$work" && mkdir -p "$work"
failures=0 passed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failures=$((failures + 1)); }

tiny=(--set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2
      --set model.context_length=32 --set train.seq_len=32 --set train.batch_size=2
      --set train.log_every=1)
ck="$work/ck"
"$STRATA_BIN" train "${tiny[@]}" --set train.steps=4 --save-every 2 --keep 0 \
  --checkpoint-dir "$ck" --quiet 2>"$work/first.log" || {
  echo "the first run failed: $(cat "$work/first.log")"
  exit 1
}

# expect_refused NAME PATTERN ARGS...: `train ARGS` exits 2 with one stderr line matching
# PATTERN, and writes no metrics file (the refusal comes before anything is created).
expect_refused() {
  local name=$1 pattern=$2
  shift 2
  rm -f "$work/metrics.jsonl"
  local err status lines
  err=$("$STRATA_BIN" train "$@" --metrics "$work/metrics.jsonl" 2>&1 >/dev/null)
  status=$?
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [ "$status" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -qE -- "$pattern" <<<"$err" ||
    [ -e "$work/metrics.jsonl" ]; then
    bad "$name: status $status, $lines lines, wanted /$pattern/; got: $err"
  else
    ok "$name: $err"
  fi
}

# Resuming where there is nothing left to train.
expect_refused at_target \
  "checkpoint .*step-00000004 is at step 4 and train.steps is 4: nothing to train \(raise train.steps above 4\)" \
  "${tiny[@]}" --set train.steps=4 --resume "$ck"
expect_refused past_target 'is at step 4 and train.steps is 3: nothing to train' \
  "${tiny[@]}" --set train.steps=3 --resume "$ck"

# Changes that move the data stream: refused, naming the field and the flag.
expect_refused batch_changed \
  "train.batch_size 2 -> 4 would read other tokens .*--allow-changes train.batch_size$" \
  "${tiny[@]}" --set train.batch_size=4 --set train.steps=6 --resume "$ck"
expect_refused two_changed \
  'train.seq_len 32 -> 16, train.grad_accum 1 -> 2 .*--allow-changes train.seq_len,train.grad_accum$' \
  "${tiny[@]}" --set train.seq_len=16 --set train.grad_accum=2 --set train.steps=6 --resume "$ck"
for i in $(seq 40); do echo "Another corpus, line $i: the quick brown fox."; done >"$work/other.txt"
"$STRATA_BIN" prepare --in "$work/other.txt" --out "$work/other.bin" 2>/dev/null ||
  bad "prepare other.bin"
expect_refused data_changed 'data.train "embedded" -> ".*other.bin"' \
  "${tiny[@]}" --set data.train="$work/other.bin" --set train.steps=6 --resume "$ck"
expect_refused allow_wrong_field '--allow-changes train.batch_size$' \
  "${tiny[@]}" --set train.batch_size=4 --set train.steps=6 --resume "$ck" \
  --allow-changes train.seq_len
expect_refused allow_unknown "--allow-changes: 'train.batchsize' is not a config key" \
  "${tiny[@]}" --set train.steps=6 --resume "$ck" --allow-changes train.batchsize
expect_refused allow_without_resume '--allow-changes needs --resume DIR' \
  "${tiny[@]}" --allow-changes train.batch_size

# Which tensors train (lora.*) is the checkpoint's shape: never resumed with another.
expect_refused lora_added \
  'lora.rank 0 -> 4 would change which tensors train; a checkpoint resumes with its own adapters' \
  "${tiny[@]}" --set lora.rank=4 --set train.steps=6 --resume "$ck" --allow-changes lora.rank

# expect_resumed NAME LINES ARGS...: `train ARGS` exits 0 having resumed, and its log has each
# line of LINES (newline-separated fixed strings).
expect_resumed() {
  local name=$1 want=$2
  shift 2
  local log="$work/$name.log" missing=""
  if ! "$STRATA_BIN" train "$@" 2>"$log"; then
    bad "$name: exit $?: $(cat "$log")"
    return
  fi
  while IFS= read -r line; do
    grep -qF -- "$line" "$log" || missing+=" [$line]"
  done <<<"$want"
  if [ -n "$missing" ]; then bad "$name: missing$missing in: $(cat "$log")"; else ok "$name"; fi
}

# Allowed changes: logged, one line each, and the run goes on.
expect_resumed lr_steps_precision "changed since the checkpoint: train.steps 4 -> 6
changed since the checkpoint: train.precision \"f32\" -> \"bf16\"
changed since the checkpoint: optim.lr 0.003 -> 0.001
resumed from $ck/step-00000004 at step 4" \
  "${tiny[@]}" --set train.steps=6 --set optim.lr=0.001 --set train.precision=bf16 --resume "$ck"
expect_resumed batch_allowed "changed since the checkpoint: train.batch_size 2 -> 4
resumed from $ck/step-00000004 at step 4" \
  "${tiny[@]}" --set train.batch_size=4 --set train.steps=6 --resume "$ck" \
  --allow-changes train.batch_size,optim.lr
# Unchanged: no such line.
if "$STRATA_BIN" train "${tiny[@]}" --set train.steps=5 --resume "$ck" 2>"$work/same.log" &&
  [ "$(grep -c 'changed since the checkpoint' "$work/same.log")" -eq 1 ]; then
  ok "only_steps_changed"
else
  bad "only_steps_changed: $(cat "$work/same.log")"
fi

# A step directory whose name, manifest and trainer state disagree.
cp -r "$ck/step-00000002" "$ck/step-00000003"
expect_refused renamed_step 'step-00000003 is named for step 3 but holds step 2' \
  "${tiny[@]}" --set train.steps=6 --resume "$ck/step-00000003"
rm -rf "$ck/step-00000003"
mkdir -p "$work/edited" && cp -r "$ck/step-00000002" "$work/edited/"
sed -i 's/"step": *2/"step":5/' "$work/edited/step-00000002/manifest.json"
expect_refused manifest_step 'manifest.json says step 5, trainer_state.json step 2' \
  "${tiny[@]}" --set train.steps=6 --resume "$work/edited/step-00000002"

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
