#!/usr/bin/env bash
# Soak: train offloaded for MINUTES under random storage faults and random SIGKILLs, resuming
# from the newest checkpoint each time, then check that the final state equals an undisturbed
# run's and that nothing leaked.
#   Each attempt draws one disturbance: a SIGKILL after a random delay (0.2 .. 2.5 s), or a
#   fault spec for io.faults on the store's and the checkpoints' I/O: EIO on reads or writes
#   with a small probability (the run stops with exit 1 naming the file), short transfers and
#   EINTR (retried by the engine: the run goes on), or delays. Rounds of training to the end
#   under disturbances until MINUTES are up; after each round its final checkpoint's tensor
#   files (CRC32C) and trainer state must equal the undisturbed run's, the store directory be
#   empty and the checkpoint directory hold only step-* directories and the lock (no .tmp-*,
#   no superseded-*).
# Last line: JSON {minutes, rounds, attempts, kills, fault_runs, fault_failures, resumes,
# identical, leaked}. Exits 1 when a round's state differs or something leaked.
#   usage: bench/soak.sh [MINUTES=10] [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
minutes=${1:-10}
work=$(realpath -m "${2:-$build_dir/soak}")
rm -rf "$work" && mkdir -p "$work/store_ref" "$work/store"
RANDOM=20261203
steps=60
args=(--set model.n_layer=3 --set model.n_embd=64 --set model.context_length=64
      --set train.seq_len=64 --set train.batch_size=4 --set train.grad_accum=2
      --set train.steps=$steps --set train.schedule=vertical --set train.precision=bf16
      --set offload.params_on_host=0 --set offload.optim_on_host=0 --set offload.grads_on_host=0
      --set offload.embed_optim_on_host=false --save-every 5 --keep 2 --quiet)

"$STRATA_BIN" train "${args[@]}" --set "io.dirs=[\"$work/store_ref\"]" \
  --checkpoint-dir "$work/ref" 2>"$work/ref.log"

newest() { ls -1 "$work/ckpt" 2>/dev/null | grep '^step-' | sort | tail -n 1 || true; }
final=$(printf 'step-%08d' $steps)
# The final checkpoint of the disturbed round against the undisturbed run's: "true" or "false".
same_as_ref() {
  /usr/bin/python3 - "$work/ref/$final" "$work/ckpt/$final" <<'PY'
import json, sys
ref, got = sys.argv[1:3]
crc = lambda d: {f["name"]: f["crc32c"] for f in json.load(open(d + "/manifest.json"))["files"]
                 if f["name"].endswith(".safetensors")}
state = lambda d: {k: v for k, v in json.load(open(d + "/trainer_state.json")).items()
                   if k not in ("run_id", "lineage")}
print("true" if crc(ref) == crc(got) and state(ref) == state(got) else "false")
PY
}
faults=("read:p0.002:eio" "write:p0.002:eio" "any:p0.05:short" "any:p0.05:eintr"
        "any:p0.02:delay_us=2000" "write:p0.001:enospc")
end=$((SECONDS + minutes * 60))
rounds=0 attempts=0 kills=0 fault_runs=0 fault_failures=0 resumes=0 identical=true leaked=""
# Rounds until the time is up: each trains to the end under disturbances (every attempt is
# SIGKILLed after 0.2 .. 2.5 s unless it ends first; half of them also run with a fault spec),
# then its final state is compared and the directories checked for leftovers.
while [ "$SECONDS" -lt "$end" ]; do
  rounds=$((rounds + 1))
  rm -rf "$work/ckpt" && mkdir -p "$work/ckpt"
  while [ ! -f "$work/ckpt/$final/manifest.json" ]; do
    attempts=$((attempts + 1))
    resume=()
    [ -n "$(newest)" ] && resume=(--resume "$work/ckpt") && resumes=$((resumes + 1))
    limit=$(/usr/bin/python3 -c "print(round(0.2 + 2.3 * $((RANDOM % 100)) / 100, 2))")
    extra=()
    if ((RANDOM % 2)); then
      extra=(--set "io.faults=${faults[RANDOM % ${#faults[@]}]},seed=$RANDOM")
      fault_runs=$((fault_runs + 1))
    fi
    set +e
    timeout -s KILL "$limit" "$STRATA_BIN" train "${args[@]}" "${extra[@]}" \
      --set "io.dirs=[\"$work/store\"]" --checkpoint-dir "$work/ckpt" "${resume[@]}" \
      2>"$work/run.log"
    code=$?
    set -e
    # `timeout -s KILL` kills its whole process group, itself included, so the killed run may
    # still be exiting when it returns: wait until it is gone (a user restarting would too).
    # (the pattern does not match its own grep: "ckp[t]")
    while grep -qs -- "$work/ckp[t]" /proc/[0-9]*/cmdline; do sleep 0.05; done
    if [ "$code" -eq 137 ]; then
      kills=$((kills + 1))
    elif [ "$code" -ne 0 ] && ((${#extra[@]})); then
      fault_failures=$((fault_failures + 1))  # an injected EIO or ENOSPC stopped it, as it should
    elif [ "$code" -ne 0 ]; then
      echo "soak: attempt $attempts failed by itself (exit $code):" >&2
      cat "$work/run.log" >&2
      exit 1
    fi
  done
  # A SIGKILL leaves the store file of the run it killed; the next run in the directory takes it
  # over and removes it (Note [Stopping on a signal]). One more run, with nothing left to train,
  # is that next run: the check below is of what a user would find after it.
  "$STRATA_BIN" train "${args[@]}" --set "io.dirs=[\"$work/store\"]" --checkpoint-dir "$work/ckpt" \
    --resume "$work/ckpt" 2>"$work/run.log" || { cat "$work/run.log" >&2; exit 1; }
  [ "$(same_as_ref)" = true ] || identical=false
  left=$(cd "$work" && { ls -A store; ls -A ckpt | grep -v -e '^step-' -e '^\.lock$'; } || true)
  [ -z "$left" ] || leaked="$leaked $(echo $left)"
done
rm -rf "$work"
printf '{"minutes": %s, "rounds": %d, "attempts": %d, "kills": %d, "fault_runs": %d, "fault_failures": %d, "resumes": %d, "identical": %s, "leaked": "%s"}\n' \
  "$minutes" "$rounds" "$attempts" "$kills" "$fault_runs" "$fault_failures" "$resumes" \
  "$identical" "${leaked# }"
[ "$identical" = true ] && [ -z "$leaked" ]
