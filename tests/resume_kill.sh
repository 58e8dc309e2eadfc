#!/usr/bin/env bash
# CTest `resume_kill`: SIGKILL at random moments, resume each time, end where an uninterrupted
# run ends.
# A small vertical run (state on storage) checkpoints every 2 steps; checkpoint writes are rate-
# limited (io.write_bytes_per_s) so they take most of the wall time and many kills land inside
# one (seen as a .tmp-step-* directory left behind). The harness kills the run at least 20 times
# with `timeout -s KILL` after a random delay, restarting it with --resume whenever a complete
# checkpoint exists; every restart must resume from the newest complete checkpoint (never from a
# half-written one), and no run may fail on its own. The final checkpoint of the interrupted
# run must equal the uninterrupted run's bit for bit (same CRC32C of weights and moments).
# The delays are scaled by the uninterrupted run's own timing (its start-up until the first
# checkpoint, and the time between checkpoints), so that a slow build (a sanitizer's, a busy
# machine) still gets kills after start-up, inside writes, and resumes that make progress.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/resume_kill"
rm -rf "$work" && mkdir -p "$work/store_ref" "$work/store"
RANDOM=20261202  # a fixed sequence of delays
steps=80
args=(--set model.n_layer=2 --set model.n_embd=64 --set model.context_length=64
      --set train.seq_len=64 --set train.batch_size=4 --set train.grad_accum=2
      --set train.steps=$steps --set train.schedule=vertical
      --set offload.params_on_host=0 --set offload.optim_on_host=0
      --set io.write_bytes_per_s=8000000 --save-every 2 --keep 2 --quiet)

now() { date +%s.%N; }
started=$(now)
"$STRATA_BIN" train "${args[@]}" --set "io.dirs=[\"$work/store_ref\"]" \
  --checkpoint-dir "$work/ref" 2>"$work/ref.log" &
ref_pid=$!
while [ ! -d "$work/ref/step-00000002" ] && kill -0 "$ref_pid" 2>/dev/null; do sleep 0.02; done
first_checkpoint=$(now)
wait "$ref_pid"
finished=$(now)
# Start-up (to the end of the first step) and the seconds between two checkpoints, measured.
read -r startup interval < <(python3 -c "
first, total, count = $first_checkpoint - $started, $finished - $started, $steps // 2
interval = (total - first) / (count - 1)
print(max(first - interval, 0.05), interval)")
echo "uninterrupted run: start-up ${startup} s, ${interval} s between checkpoints"

newest() {  # the newest complete checkpoint's step directory name, or nothing
  ls -1 "$work/ckpt" 2>/dev/null | grep '^step-' | sort | tail -n 1 || true
}

kills=0 during_write=0 attempts=0 resumes=0
while true; do
  attempts=$((attempts + 1))
  [ "$attempts" -le 200 ] || { echo "no progress after 200 attempts" >&2; exit 1; }
  before=$(newest)
  resume=()
  [ -n "$before" ] && resume=(--resume "$work/ckpt")
  # Start-up plus 0.2 .. 2 checkpoint intervals, then SIGKILL; after 20 kills, let it finish.
  delay=$(printf '0.%02d' $((RANDOM % 100)))
  limit=$(python3 -c "print($startup + $interval * (0.2 + 1.8 * $delay))")
  [ "$kills" -ge 20 ] && limit=600
  set +e
  timeout -s KILL "$limit" "$STRATA_BIN" train "${args[@]}" --set "io.dirs=[\"$work/store\"]" \
    --checkpoint-dir "$work/ckpt" "${resume[@]}" 2>"$work/run.log"
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
    if ls -1a "$work/ckpt" 2>/dev/null | grep -q '^\.tmp-step-'; then
      during_write=$((during_write + 1))
    fi
    continue
  fi
  [ "$code" -eq 0 ] || { echo "attempt $attempts failed by itself (exit $code):" >&2; cat "$work/run.log" >&2; exit 1; }
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
[ "$kills" -ge 20 ] || { echo "only $kills kills" >&2; exit 1; }
[ "$during_write" -ge 1 ] || { echo "no kill landed during a checkpoint write" >&2; exit 1; }
[ "$resumes" -ge 5 ] || { echo "only $resumes resumes" >&2; exit 1; }
