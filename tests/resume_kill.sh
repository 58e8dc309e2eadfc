#!/usr/bin/env bash
# CTest `resume_kill`: SIGKILL at chosen moments, resume each time, end where an uninterrupted
# run ends.
# A small vertical run (state on storage) checkpoints every 2 steps; checkpoint writes are rate-
# limited (io.write_bytes_per_s) so they take most of the wall time. The harness kills the run
# with SIGKILL 20 times, restarting it with --resume whenever a complete checkpoint exists; every
# restart must resume from the newest complete checkpoint (never from a half-written one), and
# no run may fail on its own. The final checkpoint of the interrupted run must equal the
# uninterrupted run's bit for bit (same CRC32C of weights and moments).
# The kills follow the run's own checkpoints, not the clock, so a slow build (a sanitizer's, a
# busy machine) gets the same kinds of kill as a fast one: alternately, as soon as the run's
# next checkpoint write has begun (its .tmp-step-*-PID directory exists: a kill inside a write,
# which the next save clears away), and at a random moment up to 0.5 s after its next complete
# checkpoint (between writes, or in the next one). So every second attempt makes progress, and
# 20 kills leave the run well short of its end.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/resume_kill"
rm -rf "$work" && mkdir -p "$work/store_ref" "$work/store"
RANDOM=20261202  # a fixed sequence of delays
steps=60
args=(--set model.n_layer=2 --set model.n_embd=64 --set model.context_length=64
      --set train.seq_len=64 --set train.batch_size=4 --set train.grad_accum=2
      --set train.steps=$steps --set train.schedule=vertical
      --set offload.params_on_host=0 --set offload.optim_on_host=0
      --set io.write_bytes_per_s=8000000 --save-every 2 --keep 2 --quiet)

"$STRATA_BIN" train "${args[@]}" --set "io.dirs=[\"$work/store_ref\"]" \
  --checkpoint-dir "$work/ref" 2>"$work/ref.log"

# The helpers below are polled every 10 ms while a run trains, so they use bash builtins only:
# with a process per poll (ls, grep, awk, sleep) the harness took more CPU than the runs it kills.
shopt -s nullglob
exec {nap_fd}<> <(:)  # a pipe nobody writes: `read -t` on it is a sleep without a process
nap() { read -r -t "$1" -u "$nap_fd" || true; }
find_newest() {  # sets newest: the newest complete checkpoint's step directory name, or nothing
  local steps=("$work"/ckpt/step-*)  # glob results are sorted, and step names sort by step
  newest=""
  if [ "${#steps[@]}" -gt 0 ]; then newest=${steps[-1]##*/}; fi
}
alive() {  # whether process $1 runs (a finished one not yet waited for is a zombie: no)
  local pid comm state
  read -r pid comm state _ 2>/dev/null <"/proc/$1/stat" || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}
writing() {  # whether run $1 has a checkpoint write under way (or left one behind)
  compgen -G "$work/ckpt/.tmp-step-*-$1" >/dev/null
}

kills=0 during_write=0 attempts=0 resumes=0
while true; do
  attempts=$((attempts + 1))
  [ "$attempts" -le 200 ] || { echo "no progress after 200 attempts" >&2; exit 1; }
  find_newest
  before=$newest
  resume=()
  [ -n "$before" ] && resume=(--resume "$work/ckpt")
  "$STRATA_BIN" train "${args[@]}" --set "io.dirs=[\"$work/store\"]" \
    --checkpoint-dir "$work/ckpt" "${resume[@]}" 2>"$work/run.log" &
  pid=$!
  if [ "$kills" -lt 20 ]; then  # after 20 kills, let it finish
    in_write=$((attempts % 2))
    for ((i = 0; i < 12000; i++)); do  # 120 s at most
      alive "$pid" || break
      if [ "$in_write" -eq 1 ] && writing "$pid"; then break; fi
      if [ "$in_write" -eq 0 ] && find_newest && [ "$newest" != "$before" ]; then
        printf -v delay '0.%02d' $((RANDOM % 50))
        nap "$delay"
        break
      fi
      nap 0.01
    done
    [ "$i" -lt 12000 ] || { echo "attempt $attempts: no checkpoint within 120 s" >&2; exit 1; }
    kill -9 "$pid" 2>/dev/null || true
  fi
  set +e
  wait "$pid" 2>/dev/null
  code=$?
  set -e
  if [ -n "$before" ] && grep -q "resumed from" "$work/run.log"; then
    resumes=$((resumes + 1))
    grep -q "resumed from $work/ckpt/$before at step" "$work/run.log" || {
      echo "attempt $attempts resumed from the wrong checkpoint (newest was $before):" >&2
      cat "$work/run.log" >&2
      exit 1
    }
  fi
  if [ "$code" -eq 137 ]; then
    kills=$((kills + 1))
    if writing "$pid"; then during_write=$((during_write + 1)); fi
    continue
  fi
  [ "$code" -eq 0 ] || { echo "attempt $attempts failed by itself (exit $code):" >&2; cat "$work/run.log" >&2; exit 1; }
  [ "$kills" -ge 20 ] || { echo "the run ended after only $kills kills" >&2; exit 1; }
  break
done

final="step-$(printf '%08d' $steps)"
python3 - "$work/ref/$final/manifest.json" "$work/ckpt/$final/manifest.json" \
  "$work/ref/$final/trainer_state.json" "$work/ckpt/$final/trainer_state.json" <<'PY'
import json, sys
ref, got = (json.load(open(p)) for p in sys.argv[1:3])
crc = lambda m: {f["name"]: f["crc32c"] for f in m["files"]}
for name in ("model.safetensors", "exp_avg.safetensors", "exp_avg_sq.safetensors"):
    assert crc(ref)[name] == crc(got)[name], f"{name} differs from the uninterrupted run"
# The trainer state but for who wrote it (run ids: Note [Checkpoint lineage]).
state = lambda p: {k: v for k, v in json.load(open(p)).items() if k not in ("run_id", "lineage")}
assert state(sys.argv[3]) == state(sys.argv[4]), "trainer_state.json differs"
PY
echo "ok: $kills kills ($during_write during a checkpoint write), $resumes resumes, $attempts runs;" \
     "final state equals the uninterrupted run's"
[ "$during_write" -ge 1 ] || { echo "no kill landed during a checkpoint write" >&2; exit 1; }
[ "$resumes" -ge 5 ] || { echo "only $resumes resumes" >&2; exit 1; }
