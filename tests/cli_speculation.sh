#!/usr/bin/env bash
# CTest `cli_speculation`: speculative optimizer steps and alpha "auto" through `strata train`
# (Note [Speculative steps] in src/sched/schedule_spec.h; docs/design.md §5.7).
#  1. vertical, clipping on in every step, alpha 0.5 with optim.speculation on: every step is
#     repaired (metrics say so), and losses and the checkpoints (every 2 steps, written behind
#     training while repairs and switches happen) equal the alpha 1 run's bit for bit; with
#     "auto" the run waits for the norm after the first clip, same bits;
#  2. optim.alpha "auto" with --profile: the log names the alpha the simulation chose and the
#     step costs; without a profile alpha 1, saying how to get one;
#  3. a missing profile and a bad optim.speculation are one-line errors, exit 2.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_BINARY_DIR:?}" "${STRATA_SOURCE_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/cli_speculation"
rm -rf "$work" && mkdir -p "$work/store"
model=(--set model.n_layer=3 --set model.n_embd=64 --set model.n_head=2
       --set model.context_length=32 --set train.seq_len=32 --set train.batch_size=2
       --set train.grad_accum=3 --set train.steps=6 --set train.schedule=vertical
       --set "io.dirs=[\"$work/store\"]" --set optim.grad_clip=1e-6)

run() {  # name [flags...]: metrics and log under $work, an export of the final weights
  local name=$1
  shift
  "$STRATA_BIN" train "${model[@]}" "$@" --metrics "$work/$name.jsonl" \
    --save-every 2 --keep 3 --checkpoint-dir "$work/ckpt_$name" 2>"$work/$name.log"
}

# 1. Exactness through the CLI.
run exact --set optim.alpha=1
run spec --set optim.alpha=0.5 --set optim.speculation=on
run auto --set optim.alpha=0.5
grep -q "optim.speculation on: speculate" "$work/spec.log"
python3 - "$work" <<'PY'
import json, sys, hashlib, glob, os
work = sys.argv[1]
def rows(name):
    return [json.loads(l) for l in open(f"{work}/{name}.jsonl")]
def weights(name):  # per checkpoint: a hash of its tensor files (weights and moments)
    out = []
    for step in sorted(glob.glob(f"{work}/ckpt_{name}/step-*")):
        h = hashlib.sha256()
        for f in sorted(os.listdir(step)):
            if f.endswith(".safetensors"):
                h.update(open(os.path.join(step, f), "rb").read())
        out.append((os.path.basename(step), h.hexdigest()))
    assert len(out) == 3, out
    return out
exact, spec, auto = rows("exact"), rows("spec"), rows("auto")
assert [r["speculation"] for r in spec] == ["repaired"] * 6, [r.get("speculation") for r in spec]
modes = [r["speculation"] for r in auto]
assert modes[0] == "repaired" and modes[1] == "waited", modes
assert "speculation" not in exact[0], "alpha 1 has nothing to speculate"
for other, name in ((spec, "spec"), (auto, "auto")):
    assert [r["loss"] for r in other] == [r["loss"] for r in exact], name
    assert weights(name) == weights("exact"), f"{name}: a checkpoint differs from alpha 1's"
print("speculation: 6/6 steps repaired, auto", modes, "- losses and checkpoints bit-identical")
PY

# 2. optim.alpha "auto".
rm -rf "$work/ckpt_"*
"$STRATA_BIN" train "${model[@]}" --set train.steps=1 \
  --profile "$STRATA_SOURCE_DIR/profiles/a100-80gb-4nvme.json" 2>"$work/profile.log"
grep -q "optim.alpha auto: [0-9.]* from the simulation of this run's plans (profile a100-80gb-4nvme)" \
  "$work/profile.log" || { cat "$work/profile.log"; exit 1; }
"$STRATA_BIN" train "${model[@]}" --set train.steps=1 2>"$work/noprofile.log"
grep -q "optim.alpha auto: 1 (no --profile" "$work/noprofile.log"

# 3. Bad input.
expect_refused() {  # what-to-find args...
  local want=$1
  shift
  set +e
  "$STRATA_BIN" train "${model[@]}" "$@" 2>"$work/err.log"
  local rc=$?
  set -e
  [ "$rc" = 2 ] || { echo "exit $rc, want 2: $*"; cat "$work/err.log"; exit 1; }
  grep -q "$want" "$work/err.log" || { echo "want '$want'"; cat "$work/err.log"; exit 1; }
  [ "$(grep -c . "$work/err.log")" = 1 ] || { echo "not one line:"; cat "$work/err.log"; exit 1; }
}
expect_refused "$work/none.json" --profile "$work/none.json"
expect_refused "optim.speculation" --set optim.speculation=maybe
echo "cli_speculation: ok"
