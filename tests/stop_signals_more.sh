#!/usr/bin/env bash
# CTest `stop_signals_more` (Note [Stopping on a signal] in src/cli/stop_signals.h), the signals
# stop_signals.sh does not cover:
#  - SIGHUP mid-run: like SIGTERM, at the step boundary with a checkpoint, exit 129, store removed;
#  - the reader of train's output going away (`train 2>&1 | grep -m1`): the write fails with
#    EPIPE, the run stops at the next boundary with a checkpoint, exit 141, store removed;
#  - SIGINT, SIGTERM or SIGHUP while set-up is filling the store: 128 + N at once, the store and
#    the metrics file the run made removed;
#  - SIGTERM to `prepare` while it writes: exit 143, no temporary file, no output;
#  - two SIGINTs, SIGTERMs or SIGHUPs while a checkpoint is being written (slowed down): 128 + N
#    at once, its temporary directory removed (Note [Scratch files]), no step directory published.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/stop_signals_more"
rm -rf "$work" && mkdir -p "$work"
steps=12
args=(--set model.n_layer=2 --set model.n_embd=64 --set model.context_length=64
      --set train.seq_len=64 --set train.batch_size=4 --set train.grad_accum=2
      --set train.steps=$steps --set train.schedule=vertical --set train.log_every=1
      --set offload.params_on_host=0 --set offload.optim_on_host=0)
slow=(--set io.read_bytes_per_s=4000000)  # steps of ~0.3 s, so signals land mid-run

fail() { echo "stop_signals_more: $*" >&2; exit 1; }
wait_for() {  # wait_for WHAT TEST...: until the test holds (at most 60 s)
  local what=$1
  shift
  for _ in $(seq 3000); do
    "$@" && return 0
    sleep 0.02
  done
  fail "no $what in 60 s"
}
empty() { [ -z "$(ls -A "$1")" ]; }
nonempty() { [ -n "$(ls -A "$1" 2>/dev/null)" ]; }
lines_at_least() { [ -f "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ]; }
checkpointed() {  # checkpointed RUN: the step it stopped at has a checkpoint
  local stopped
  stopped=$(sed -n "s/.*stopped by $2 after step \([0-9]*\) of $steps.*/\1/p" "$work/$1/log")
  [ -n "$stopped" ] && [ "$stopped" -lt "$steps" ] || fail "$1 did not stop mid-run: $(cat "$work/$1/log")"
  [ -f "$work/$1/ckpt/$(printf 'step-%08d' "$stopped")/manifest.json" ] ||
    fail "$1: no checkpoint of step $stopped"
}

# SIGHUP: the step boundary, a checkpoint, 129.
mkdir -p "$work/hup/store"
"$STRATA_BIN" train "${args[@]}" "${slow[@]}" --set "io.dirs=[\"$work/hup/store\"]" --quiet \
  --metrics "$work/hup/metrics.jsonl" --save-every 4 --checkpoint-dir "$work/hup/ckpt" \
  2>"$work/hup/log" &
pid=$!
wait_for "second step" lines_at_least "$work/hup/metrics.jsonl" 2
kill -HUP "$pid"
set +e; wait "$pid"; code=$?; set -e
[ "$code" -eq 129 ] || fail "SIGHUP: exit $code, expected 129: $(cat "$work/hup/log")"
checkpointed hup SIGHUP
empty "$work/hup/store" || fail "SIGHUP left the store"
echo "ok   SIGHUP: checkpoint, exit 129, store removed"

# The reader goes away after step 2's line: the next line's write fails (EPIPE). The run's log
# goes with the pipe: its exit status, metrics and checkpoints tell what happened.
mkdir -p "$work/pipe/store"
set +e
"$STRATA_BIN" train "${args[@]}" "${slow[@]}" --set "io.dirs=[\"$work/pipe/store\"]" \
  --metrics "$work/pipe/metrics.jsonl" --save-every 4 --checkpoint-dir "$work/pipe/ckpt" \
  2>&1 >/dev/null | grep -m1 -qE '^step +2/'
codes=("${PIPESTATUS[@]}")
set -e
[ "${codes[0]}" -eq 141 ] || fail "closed pipe: exit ${codes[0]}, expected 141"
done=$(wc -l <"$work/pipe/metrics.jsonl")
[ "$done" -lt "$steps" ] || fail "closed pipe: the run went on to the end"
[ -f "$work/pipe/ckpt/$(printf 'step-%08d' "$done")/manifest.json" ] ||
  fail "closed pipe: no checkpoint of step $done: $(ls "$work/pipe/ckpt")"
empty "$work/pipe/store" || fail "closed pipe left the store"
echo "ok   closed pipe: stopped after step $done with a checkpoint, exit 141, store removed"

# Each of SIGINT, SIGTERM, SIGHUP while set-up fills the store (slowed down to a crawl): at once,
# nothing left.
for sig in INT TERM HUP; do
  num=$(kill -l "$sig")
  mkdir -p "$work/setup-$sig/store"
  "$STRATA_BIN" train "${args[@]}" --set io.write_bytes_per_s=1000000 \
    --set "io.dirs=[\"$work/setup-$sig/store\"]" --metrics "$work/setup-$sig/metrics.jsonl" \
    2>"$work/setup-$sig/log" &
  pid=$!
  wait_for "store file" nonempty "$work/setup-$sig/store"
  kill -"$sig" "$pid"
  set +e; wait "$pid"; code=$?; set -e
  [ "$code" -eq $((128 + num)) ] ||
    fail "SIG$sig in set-up: exit $code, expected $((128 + num)): $(cat "$work/setup-$sig/log")"
  grep -qx "strata: stopped at once by SIG$sig" "$work/setup-$sig/log" ||
    fail "SIG$sig in set-up: not stopped during set-up: $(cat "$work/setup-$sig/log")"
  empty "$work/setup-$sig/store" || fail "SIG$sig in set-up: left the store"
  [ ! -e "$work/setup-$sig/metrics.jsonl" ] || fail "SIG$sig in set-up: left the metrics file"
  echo "ok   SIG$sig during set-up: exit $((128 + num)), store and metrics file removed"
done

# SIGTERM to prepare while its temporary file exists.
mkdir -p "$work/prep"
python3 -c "print('the slow brown fox. ' * 3000000)" >"$work/prep.txt"
"$STRATA_BIN" prepare --in "$work/prep.txt" --out "$work/prep/out.bin" 2>"$work/prep.log" &
pid=$!
wait_for "temporary file" nonempty "$work/prep"
kill -TERM "$pid"
set +e; wait "$pid"; code=$?; set -e
[ "$code" -eq 143 ] || fail "prepare: exit $code, expected 143: $(cat "$work/prep.log")"
empty "$work/prep" || fail "prepare left: $(ls -A "$work/prep")"
echo "ok   SIGTERM to prepare: exit 143, no temporary file"

# Two of each of SIGINT, SIGTERM, SIGHUP while a checkpoint is written behind training (state on
# host, no store; writes slowed to 300 kB/s): the second stops at once and the temporary
# directory goes with it.
saving() { ls -A "$1" 2>/dev/null | grep -q '^\.tmp-step-'; }
for sig in INT TERM HUP; do
  num=$(kill -l "$sig")
  mkdir -p "$work/save-$sig"
  "$STRATA_BIN" train "${args[@]}" --set offload.params_on_host=1 --set offload.optim_on_host=1 \
    --set offload.grads_on_host=1 --set io.write_bytes_per_s=300000 --save-every 2 \
    --checkpoint-dir "$work/save-$sig/ckpt" --quiet 2>"$work/save-$sig/log" &
  pid=$!
  wait_for "checkpoint being written" saving "$work/save-$sig/ckpt"
  kill -"$sig" "$pid"
  sleep 0.2
  kill -"$sig" "$pid" 2>/dev/null || true
  set +e; wait "$pid"; code=$?; set -e
  [ "$code" -eq $((128 + num)) ] ||
    fail "save, SIG$sig: exit $code, expected $((128 + num)): $(cat "$work/save-$sig/log")"
  grep -qx "strata: stopped at once by SIG$sig (the second signal)" "$work/save-$sig/log" ||
    fail "save, SIG$sig: not stopped by the second signal: $(cat "$work/save-$sig/log")"
  left=$(ls -A "$work/save-$sig/ckpt" | grep -vx .lock || true)
  [ -z "$left" ] || fail "save, SIG$sig: left $left"
  echo "ok   two SIG$sig during a checkpoint: exit $((128 + num)), its temporary directory removed"
done
