#!/usr/bin/env bash
# CTest `cli_train`: a short run of `strata train` finishes with status 0, writes one metrics
# line per step with the documented keys, and its loss falls; a run on a token file made by
# `strata prepare` trains too.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/cli_train"
rm -rf "$work" && mkdir -p "$work"
small=(--set model.n_layer=2 --set model.n_embd=64 --set model.context_length=64
       --set train.seq_len=64 --set train.batch_size=4)

"$STRATA_BIN" train "${small[@]}" --set train.steps=40 --set optim.warmup_steps=5 \
  --metrics "$work/metrics.jsonl" 2>"$work/log.txt"
python3 - "$work/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 40, f"{len(rows)} metrics lines, want 40"
for k in ("step", "loss", "lr", "grad_norm", "tokens_per_s", "iter_s", "peak_device_bytes"):
    assert all(k in r for r in rows), f"metrics key {k} missing"
assert [r["step"] for r in rows] == list(range(1, 41))  # as the console and checkpoints count
first, last = rows[0]["loss"], sum(r["loss"] for r in rows[-5:]) / 5
assert first > 5.0, f"initial loss {first} should be near ln(256)"
assert last < first - 1.0, f"loss did not fall: {first} -> {last}"
print(f"ok: loss {first:.3f} -> {last:.3f} over 40 steps")
PY
grep -q "trained 40 steps" "$work/log.txt"

# strata prepare -> llm.c .bin -> train on it
python3 -c "print('the cat sat on the mat. ' * 400)" >"$work/text.txt"
"$STRATA_BIN" prepare --in "$work/text.txt" --out "$work/text.bin"
"$STRATA_BIN" train "${small[@]}" --set train.steps=3 --set data.train="$work/text.bin" --quiet

# train.steps 0 trains nothing and says so: no loss of steps never run, the validation loss of the
# initial model when data.val is set.
log=$("$STRATA_BIN" train "${small[@]}" --set train.steps=0 --set data.val=embedded 2>&1)
grep -qE "trained 0 steps in [0-9.]+ s; validation loss [0-9]+\.[0-9]{4}$" <<<"$log" ||
  { echo "FAIL: train.steps 0: $(tail -1 <<<"$log")" >&2; exit 1; }

# `strata COMMAND --help` (or -h) prints that command's usage on stdout and exits 0, for every
# command; the error for an unknown flag points there.
for cmd in train prepare bench-io report sample eval export gather plan profile; do
  for flag in --help -h; do
    out=$("$STRATA_BIN" "$cmd" "$flag") || { echo "FAIL: strata $cmd $flag exited $?" >&2; exit 1; }
    head -1 <<<"$out" | grep -qx "usage: strata $cmd \[flags\]" ||
      { echo "FAIL: strata $cmd $flag: $(head -1 <<<"$out")" >&2; exit 1; }
    grep -q "^  $cmd " <<<"$out" || { echo "FAIL: strata $cmd $flag lacks its usage" >&2; exit 1; }
  done
done
err=$("$STRATA_BIN" train --no-such-flag 2>&1) && { echo "FAIL: an unknown flag ran" >&2; exit 1; }
grep -q "see strata train --help" <<<"$err" ||
  { echo "FAIL: an unknown flag's error does not point at --help: $err" >&2; exit 1; }
for v in --version version; do
  out=$("$STRATA_BIN" $v) && grep -qxE "strata [0-9]+\.[0-9]+\.[0-9]+" <<<"$out" ||
    { echo "FAIL: strata $v: $out" >&2; exit 1; }
done
echo "ok: every command's --help, and --version"
