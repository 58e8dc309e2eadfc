#!/usr/bin/env bash
# CTest `val_torch`: the validation loss `strata train` reports (data.val, train.eval_every) is
# PyTorch's on the same weights and batches: a short run validates on a prepared token file after
# its last step and saves a checkpoint there; the checkpoint is exported and
# tools/torch_val_loss.py computes the loss of the file's first train.eval_batches batches in
# PyTorch (Debian's python3-torch), to 1e-5 relative. Also: the metrics carry val_loss on the
# steps that validated, the summary line the last value, and a vertical run on storage reports
# the in-memory run's value to 1e-5 (its training differs in the last bits, test_offload_equiv).
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_SOURCE_DIR:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/val_torch"
rm -rf "$work" && mkdir -p "$work/store"
fail() { echo "val_torch: FAILED: $*" >&2; exit 1; }

/usr/bin/python3 - "$work/val.txt" <<'PY'
import random, sys
random.seed(5)
words = "the of a storage model block gradient weights step loss disk memory layer".split()
open(sys.argv[1], "w").write(" ".join(random.choice(words) for _ in range(6000)) + "\n")
PY
"$STRATA_BIN" prepare --in "$work/val.txt" --out "$work/val.bin" 2>/dev/null
small=(--set model.n_layer=2 --set model.n_embd=64 --set model.context_length=64
       --set train.seq_len=64 --set train.batch_size=4 --set train.steps=6
       --set "data.val=\"$work/val.bin\"" --set train.eval_every=3 --set train.eval_batches=3)

"$STRATA_BIN" train "${small[@]}" --save-every 6 --checkpoint-dir "$work/ckpt" \
  --metrics "$work/mem.jsonl" --quiet 2>"$work/mem.log" || fail "training: $(cat "$work/mem.log")"
read -r val3 val6 < <(/usr/bin/python3 - "$work/mem.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
vals = {r["step"]: r["val_loss"] for r in rows if "val_loss" in r}
if sorted(vals) != [3, 6]:
    sys.exit(f"val_loss on steps {sorted(vals)}, expected after steps 3 and 6")
print(repr(vals[3]), repr(vals[6]))
PY
) || fail "the metrics do not carry val_loss where due"
grep -q "validation loss $(printf '%.4f' "$val6")" "$work/mem.log" ||
  fail "the summary does not end with the last validation loss $val6: $(tail -1 "$work/mem.log")"

"$STRATA_BIN" export --checkpoint "$work/ckpt/step-00000006" \
  --out "$work/export/model.safetensors" 2>/dev/null
/usr/bin/python3 "$STRATA_SOURCE_DIR/tools/torch_val_loss.py" "$work/export/model.safetensors" \
  "$work/val.bin" 4 64 3 "$val6"

"$STRATA_BIN" train "${small[@]}" --set train.schedule=vertical --set offload.params_on_host=0 \
  --set offload.optim_on_host=0 --set "io.dirs=[\"$work/store\"]" --metrics "$work/vertical.jsonl" \
  --quiet 2>"$work/vertical.log" || fail "vertical training: $(cat "$work/vertical.log")"
/usr/bin/python3 - "$work/vertical.jsonl" "$val6" <<'PY' || fail "the vertical run's validation loss differs"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
got, want = rows[-1]["val_loss"], float(sys.argv[2])
print(f"ok   vertical on storage: validation loss {got:.7f}, in-memory {want:.7f}")
sys.exit(0 if abs(got - want) <= 1e-5 * abs(want) else 1)
PY
echo "ok: validation loss equals PyTorch's on the exported weights"
