#!/usr/bin/env bash
# CTest `stop_signals` (Note [Stopping on a signal] in src/cli/stop_signals.h):
#  - SIGINT mid-run: exit 130 at the next step boundary, a checkpoint of that step, the message
#    saying where to resume from, the store removed; resuming from it ends on the bits of an
#    uninterrupted run (CRC32C of every tensor file);
#  - SIGTERM without checkpoints configured: exit 143, says nothing can be resumed, store removed;
#  - two SIGINTs: exit 130 at once (no checkpoint of the interrupted step), store removed;
#  - a crash (SIGSEGV) and an abort (SIGABRT): the store removed, the signal's own exit status.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/stop_signals"
rm -rf "$work" && mkdir -p "$work"
steps=12
args=(--set model.n_layer=2 --set model.n_embd=64 --set model.context_length=64
      --set train.seq_len=64 --set train.batch_size=4 --set train.grad_accum=2
      --set train.steps=$steps --set train.schedule=vertical
      --set offload.params_on_host=0 --set offload.optim_on_host=0 --quiet)
slow=(--set io.read_bytes_per_s=4000000)  # steps of ~0.3 s, so signals land mid-run

fail() { echo "stop_signals: $*" >&2; exit 1; }

# Starts a run in the background into $work/$1 (store, metrics, log); the rest are flags.
start() {
  local name=$1
  shift
  mkdir -p "$work/$name/store"
  "$STRATA_BIN" train "${args[@]}" --set "io.dirs=[\"$work/$name/store\"]" \
    --metrics "$work/$name/metrics.jsonl" "$@" 2>"$work/$name/log" &
  pid=$!
}
# Waits until run $1 has logged $2 steps (at most 60 s).
wait_steps() {
  for _ in $(seq 600); do
    [ -f "$work/$1/metrics.jsonl" ] && [ "$(wc -l <"$work/$1/metrics.jsonl")" -ge "$2" ] && return 0
    sleep 0.1
  done
  fail "$1 logged fewer than $2 steps in 60 s: $(cat "$work/$1/log")"
}
# Waits for $pid and checks its exit status ($1 the run, $2 the status wanted).
expect_exit() {
  set +e
  wait "$pid"
  local code=$?
  set -e
  [ "$code" -eq "$2" ] || fail "$1 exited $code, expected $2: $(cat "$work/$1/log")"
  [ -z "$(ls -A "$work/$1/store")" ] || fail "$1 left its store: $(ls -A "$work/$1/store")"
}
crcs() {  # the CRC32C of the tensor files in a checkpoint's manifest
  python3 -c 'import json,sys; m=json.load(open(sys.argv[1]));
print(sorted((f["name"], f["crc32c"]) for f in m["files"] if f["name"].endswith(".safetensors")))' \
    "$1/manifest.json"
}

# The uninterrupted run.
start ref --save-every 4 --checkpoint-dir "$work/ref/ckpt"
expect_exit ref 0

# SIGINT after two steps: a checkpoint of the step it stopped at, then resume to the end.
start int "${slow[@]}" --save-every 4 --checkpoint-dir "$work/int/ckpt"
wait_steps int 2
kill -INT "$pid"
expect_exit int 130
grep -q "stopped by SIGINT after step [0-9]* of $steps; resume with --resume $work/int/ckpt/step-" \
  "$work/int/log" || fail "no resume hint: $(cat "$work/int/log")"
stopped=$(sed -n 's/.*stopped by SIGINT after step \([0-9]*\) .*/\1/p' "$work/int/log")
[ "$stopped" -lt "$steps" ] || fail "the run was not interrupted (stopped at $stopped)"
[ -f "$work/int/ckpt/$(printf 'step-%08d' "$stopped")/manifest.json" ] ||
  fail "no checkpoint of step $stopped"
"$STRATA_BIN" train "${args[@]}" --set "io.dirs=[\"$work/int/store\"]" --save-every 4 \
  --checkpoint-dir "$work/int/ckpt" --resume "$work/int/ckpt" 2>"$work/int/resume.log" ||
  fail "the resumed run failed: $(cat "$work/int/resume.log")"
final=$(printf 'step-%08d' $steps)
[ "$(crcs "$work/int/ckpt/$final")" = "$(crcs "$work/ref/ckpt/$final")" ] ||
  fail "the resumed run ends on other bits than the uninterrupted one"

# SIGTERM with no checkpoints: nothing to resume, said so.
start term "${slow[@]}"
wait_steps term 1
kill -TERM "$pid"
expect_exit term 143
grep -q "stopped by SIGTERM after step [0-9]* of $steps; no checkpoint is configured" \
  "$work/term/log" || fail "SIGTERM: $(cat "$work/term/log")"

# Two SIGINTs: stop at once, without waiting for the step boundary. Steps of ~3 s here, and the
# signals come 0.1 s apart just after one began (signals pending together would merge into one).
start twice --set io.read_bytes_per_s=500000 --save-every 4 --checkpoint-dir "$work/twice/ckpt"
wait_steps twice 1
kill -INT "$pid"
sleep 0.1
kill -INT "$pid"
expect_exit twice 130
! grep -q "stopped by SIGINT" "$work/twice/log" || fail "two SIGINTs waited for the boundary"

# A crash and an abort remove the store too, and keep their own exit status.
for sig in SEGV ABRT; do
  start "crash_$sig" "${slow[@]}"
  wait_steps "crash_$sig" 1
  kill -"$sig" "$pid"
  expect_exit "crash_$sig" $((128 + $(kill -l "$sig")))
done
echo "ok: SIGINT resumes bit-identically, SIGTERM, a second SIGINT, SIGSEGV and SIGABRT" \
     "remove the store with the right exit status"
