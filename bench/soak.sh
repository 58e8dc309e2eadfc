#!/usr/bin/env bash
# Soak: train offloaded (vertical, state on storage, bf16) for MINUTES under storage faults,
# SIGKILLs and SIGTERMs, resuming each time, and check that nothing drifts, differs or leaks.
# Two halves:
#  1. Rounds to a fixed step under disturbances: each attempt draws a SIGKILL or a SIGTERM after
#     0.2 .. 2.5 s (a SIGTERM stops at the next step boundary with a checkpoint and exit 143), and
#     half of them a fault spec for io.faults on the store's and the checkpoints' I/O: EIO on
#     reads or writes (the run stops with exit 1 naming the file), short transfers and EINTR
#     (retried: the run goes on), delays, ENOSPC. After each round its final checkpoint's tensor
#     files (CRC32C) and trainer state must equal an undisturbed run's, the store directory be
#     empty and the checkpoint directory hold only step-* directories and the lock.
#  2. One long run under the retried faults, a checkpoint every 5 steps, sampled every 2 s: its
#     resident memory (VmRSS, the median of the first and of the last tenth of the samples after
#     a 30 s warm-up) and open descriptors (the least of each tenth: a save behind training holds
#     its files open for part of nearly every second, so the baseline is the count between
#     saves, and a leaked descriptor raises it; fds_max is the most seen); then SIGTERM (exit
#     143 with a checkpoint), one resumed step, and the leftover check.
# Last line: JSON {minutes, rounds, attempts, kills, terms, fault_runs, fault_failures, resumes,
# identical, leaked, long_run_s, long_run_steps, samples, rss_start_bytes, rss_end_bytes,
# rss_growth, fds_start, fds_end, fds_max}. Exits 1 when a state differs, something leaked, RSS
# grew by 2% or more, or the baseline of descriptors changed.
#   usage: bench/soak.sh [MINUTES=30] [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
minutes=${1:-30}
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
end=$((SECONDS + minutes * 30))  # the first half
rounds=0 attempts=0 kills=0 terms=0 fault_runs=0 fault_failures=0 resumes=0 identical=true leaked=""
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
    signal=KILL
    ((RANDOM % 2)) && signal=TERM
    set +e
    timeout -s "$signal" "$limit" "$STRATA_BIN" train "${args[@]}" "${extra[@]}" \
      --set "io.dirs=[\"$work/store\"]" --checkpoint-dir "$work/ckpt" "${resume[@]}" \
      2>"$work/run.log"
    code=$?
    set -e
    [ "$code" -eq 124 ] && code=143  # timeout reports a TERM it sent as 124; the run's own is 143
    # `timeout -s KILL` kills its whole process group, itself included, so the killed run may
    # still be exiting when it returns: wait until it is gone (a user restarting would too).
    # (the pattern does not match its own grep: "ckp[t]")
    while grep -qs -- "$work/ckp[t]" /proc/[0-9]*/cmdline; do sleep 0.05; done
    if [ "$code" -eq 137 ]; then
      kills=$((kills + 1))
    elif [ "$code" -eq 143 ]; then
      terms=$((terms + 1))
    elif [ "$code" -ne 0 ] && ((${#extra[@]})); then
      fault_failures=$((fault_failures + 1))  # an injected EIO or ENOSPC stopped it, as it should
    elif [ "$code" -ne 0 ]; then
      echo "soak: attempt $attempts failed by itself (exit $code):" >&2
      cat "$work/run.log" >&2
      exit 1
    fi
  done
  # A SIGKILL leaves the store file of the run it killed; the next run in the directory takes it
  # over and removes it (Note [Stopping on a signal]). One more step from the final checkpoint,
  # saved elsewhere, is that next run: the check below is of what a user would find after it.
  [ "$(same_as_ref)" = true ] || identical=false
  "$STRATA_BIN" train "${args[@]}" --set "train.steps=$((steps + 1))" \
    --set "io.dirs=[\"$work/store\"]" --checkpoint-dir "$work/next" --resume "$work/ckpt/$final" \
    2>"$work/run.log" || { cat "$work/run.log" >&2; exit 1; }
  rm -rf "$work/next"
  left=$(cd "$work" && { ls -A store; ls -A ckpt | grep -v -e '^step-' -e '^\.lock$'; } || true)
  [ -z "$left" ] || leaked="$leaked $(echo $left)"
done

# 2. The long run: transient faults only (the engine retries them), so it trains until stopped.
long_s=$((end + minutes * 30 - SECONDS))
[ "$long_s" -ge 60 ] || long_s=60
rm -rf "$work/ckpt" && mkdir -p "$work/ckpt"
"$STRATA_BIN" train "${args[@]}" --set train.steps=100000000 \
  --set "io.faults=any:p0.02:short,seed=7" --set "io.dirs=[\"$work/store\"]" \
  --checkpoint-dir "$work/ckpt" --metrics "$work/long.jsonl" 2>"$work/long.log" &
pid=$!
samples="$work/samples.txt"
: >"$samples"
long_end=$((SECONDS + long_s))
while [ "$SECONDS" -lt "$long_end" ] && kill -0 "$pid" 2>/dev/null; do
  rss=$(awk '/^VmRSS:/ { print $2 * 1024 }' "/proc/$pid/status" 2>/dev/null || true)
  fds=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
  [ -n "$rss" ] && echo "$SECONDS $rss $fds" >>"$samples"
  sleep 2
done
kill -TERM "$pid" 2>/dev/null || true
set +e
wait "$pid"
code=$?
set -e
[ "$code" -eq 143 ] || { echo "soak: the long run exited $code, not 143:" >&2; tail "$work/long.log" >&2; exit 1; }
long_steps=$(wc -l <"$work/long.jsonl")
# One more step from its checkpoint: the resume works and removes nothing it should not.
"$STRATA_BIN" train "${args[@]}" --set "train.steps=$((long_steps + 1))" \
  --set "io.dirs=[\"$work/store\"]" --checkpoint-dir "$work/ckpt" --resume "$work/ckpt" \
  2>"$work/run.log" || { cat "$work/run.log" >&2; exit 1; }
left=$(cd "$work" && { ls -A store; ls -A ckpt | grep -v -e '^step-' -e '^\.lock$' -e '^superseded-'; } || true)
[ -z "$left" ] || leaked="$leaked $(echo $left)"
flat=$(/usr/bin/python3 - "$samples" "$((long_end - long_s + 30))" <<'PY'
import json, statistics, sys
rows = [tuple(map(int, l.split())) for l in open(sys.argv[1])]
rows = [r for r in rows if r[0] >= int(sys.argv[2])]  # after the warm-up
k = max(1, len(rows) // 10)
med = lambda part, i: int(statistics.median(r[i] for r in part))
first, last = rows[:k], rows[-k:]
print(json.dumps({"samples": len(rows), "rss_start_bytes": med(first, 1),
                  "rss_end_bytes": med(last, 1),
                  "rss_growth": round(med(last, 1) / med(first, 1) - 1, 4),
                  "fds_start": min(r[2] for r in first), "fds_end": min(r[2] for r in last),
                  "fds_max": max(r[2] for r in rows)})[1:-1])
PY
)
rm -rf "$work"
printf '{"minutes": %s, "rounds": %d, "attempts": %d, "kills": %d, "terms": %d, "fault_runs": %d, "fault_failures": %d, "resumes": %d, "identical": %s, "leaked": "%s", "long_run_s": %d, "long_run_steps": %d, %s}\n' \
  "$minutes" "$rounds" "$attempts" "$kills" "$terms" "$fault_runs" "$fault_failures" "$resumes" \
  "$identical" "${leaked# }" "$long_s" "$long_steps" "$flat"
ok=$(/usr/bin/python3 -c "import json,sys; j=json.loads('{' + sys.argv[1] + '}'); print(int(j['rss_growth'] < 0.02 and j['fds_start'] == j['fds_end']))" "$flat")
[ "$identical" = true ] && [ -z "$leaked" ] && [ "$ok" = 1 ]
