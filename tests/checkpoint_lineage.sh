#!/usr/bin/env bash
# CTest `checkpoint_lineage` (Note [Checkpoint lineage] in src/formats/checkpoint_lineage.h):
#  - run A saves steps 2, 4, 6; run B resumes from A's step 2 into the same directory with
#    another learning rate and saves 3, 4, 5: A's steps 4 and 6 move to superseded-<A's id>/
#    (nothing deleted), every step-* left is on B's line, --keep prunes none of B's, and
#    --resume DIR continues B's step 5 (before: B skipped 4, kept A's 6, resumed from it);
#  - a fresh run into a directory holding another run's checkpoints is refused (exit 2);
#  - a second run on a directory in use is refused naming the holder's pid (exit 2);
#  - a live process's temporary save directory survives another run's save.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/checkpoint_lineage"
rm -rf "$work" && mkdir -p "$work"
ck="$work/ckpt"
args=(--set model.n_layer=1 --set model.n_embd=64 --set model.context_length=64
      --set train.seq_len=64 --set train.batch_size=2 --quiet)
fail() { echo "checkpoint_lineage: $*" >&2; exit 1; }
id_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' "$1/trainer_state.json"; }
step() { printf '%s/step-%08d' "$ck" "$1"; }

"$STRATA_BIN" train "${args[@]}" --set train.steps=6 --save-every 2 --keep 0 \
  --checkpoint-dir "$ck" 2>"$work/a.log" || fail "run A: $(cat "$work/a.log")"
a=$(id_of "$(step 6)")
# A live process's temporary directory (this shell's pid) must survive B's saves.
live="$ck/.tmp-step-00000099-$$"
mkdir -p "$live"
"$STRATA_BIN" train "${args[@]}" --set train.steps=5 --set optim.lr=1e-3 --save-every 1 \
  --keep 3 --checkpoint-dir "$ck" --resume "$(step 2)" 2>"$work/b.log" ||
  fail "run B: $(cat "$work/b.log")"
b=$(id_of "$(step 5)")
[ "$a" != "$b" ] || fail "A and B have the same run id $a"
[ -d "$live" ] || fail "B's save removed a live process's temporary directory"
for s in 4 6; do
  [ -f "$ck/superseded-$a/step-0000000$s/manifest.json" ] || fail "A's step $s was not kept aside"
  grep -q "moved aside.*superseded-$a/step-0000000$s" "$work/b.log" || fail "moving $s not logged"
done
left=$(cd "$ck" && ls -d step-* | tr '\n' ' ')
[ "$left" = "step-00000003 step-00000004 step-00000005 " ] || fail "left: $left"
for s in 3 4 5; do
  [ "$(id_of "$(step "$s")")" = "$b" ] || fail "step $s is not B's"
done
python3 - "$(step 5)/trainer_state.json" "$a" "$b" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["lineage"] == sys.argv[2:4], f"lineage {s['lineage']}, expected {sys.argv[2:4]}"
PY
"$STRATA_BIN" train "${args[@]}" --set train.steps=6 --set optim.lr=1e-3 --resume "$ck" \
  2>"$work/c.log" || fail "run C: $(cat "$work/c.log")"
grep -q "resumed from $(step 5) at step 5" "$work/c.log" || fail "C: $(cat "$work/c.log")"

# A fresh run into B's directory: refused, one line, exit 2.
set +e
"$STRATA_BIN" train "${args[@]}" --set train.steps=2 --save-every 1 --checkpoint-dir "$ck" \
  2>"$work/d.log"
code=$?
set -e
[ "$code" -eq 2 ] || fail "fresh run into a used directory exited $code"
grep -q "already holds checkpoints of another run (steps 3, 4, 5); continue it with --resume" \
  "$work/d.log" || fail "fresh run: $(cat "$work/d.log")"

# Two runs on one directory at once: the second is refused naming the first's pid.
"$STRATA_BIN" train "${args[@]}" --set train.steps=200 --save-every 100 \
  --checkpoint-dir "$work/shared" 2>"$work/e.log" &
first=$!
for _ in $(seq 100); do [ -s "$work/shared/.lock" ] && break; sleep 0.1; done
set +e
"$STRATA_BIN" train "${args[@]}" --set train.steps=2 --save-every 1 \
  --checkpoint-dir "$work/shared" 2>"$work/f.log"
code=$?
set -e
kill "$first" 2>/dev/null || true
wait "$first" || true
[ "$code" -eq 2 ] || fail "a second run on a directory in use exited $code"
grep -q "checkpoint directory $work/shared is in use by another run (pid $first)" "$work/f.log" ||
  fail "second run: $(cat "$work/f.log")"
echo "ok: B superseded A's later steps and is resumed; a fresh run and a concurrent one refused"
