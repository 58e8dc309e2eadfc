#!/usr/bin/env bash
# CTest `cli_eval`: `strata eval` gives the loss and perplexity of a checkpoint or of a Hugging
# Face model directory on a token file without training (Note [Evaluation batches] in
# src/cli/cmd_eval.cpp). Checked:
#  - on the first train.eval_batches batches it is the validation loss the training run
#    reported after its last step, bit for bit, in memory, horizontal on host and vertical on
#    storage;
#  - over the whole file (every whole batch, once) it is PyTorch's loss on the exported weights
#    (tools/torch_val_loss.py, 1e-5 relative), perplexity = exp(loss), and the batch and token
#    counts are the file's;
#  - the exported Hugging Face directory (--model) gives the checkpoint's loss bit for bit;
#  - bad input is one line and exit 2.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_SOURCE_DIR:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/cli_eval"
rm -rf "$work" && mkdir -p "$work/store"
fail() { echo "cli_eval: FAILED: $*" >&2; exit 1; }

/usr/bin/python3 - "$work/val.txt" <<'PY'
import random, sys
random.seed(9)
words = "eval the loss of a model on held out tokens per batch".split()
open(sys.argv[1], "w").write(" ".join(random.choice(words) for _ in range(3000)) + "\n")
PY
"$STRATA_BIN" prepare --in "$work/val.txt" --out "$work/val.bin" 2>/dev/null
"$STRATA_BIN" train --set model.n_layer=2 --set model.n_embd=64 --set model.context_length=64 \
  --set train.seq_len=64 --set train.batch_size=4 --set train.steps=4 \
  --set "data.val=\"$work/val.bin\"" --set train.eval_batches=3 --save-every 4 \
  --checkpoint-dir "$work/ckpt" --metrics "$work/metrics.jsonl" --quiet 2>"$work/train.log" ||
  fail "training: $(cat "$work/train.log")"
val=$(/usr/bin/python3 -c 'import json, sys
print(repr([json.loads(l) for l in open(sys.argv[1])][-1]["val_loss"]))' "$work/metrics.jsonl")

# field JSON KEY: one field of eval's last line.
field() { /usr/bin/python3 -c 'import json, sys; print(repr(json.loads(sys.argv[1])[sys.argv[2]]))' "$1" "$2"; }
storage=(--set train.schedule=vertical --set offload.params_on_host=0 --set offload.optim_on_host=0
         --set offload.grads_on_host=0 --set "io.dirs=[\"$work/store\"]")
host=(--set train.schedule=horizontal --set offload.params_on_host=1 --set offload.optim_on_host=1
      --set offload.grads_on_host=1 --set offload.checkpoints_on_host=1)
for how in in_memory host storage; do
  case $how in
    in_memory) extra=(--set train.schedule=in_memory) ;;
    host) extra=("${host[@]}") ;;
    storage) extra=("${storage[@]}") ;;
  esac
  out=$("$STRATA_BIN" eval --checkpoint "$work/ckpt" --data "$work/val.bin" --batches 3 \
    "${extra[@]}" --quiet) || fail "eval ($how) failed"
  [ "$(field "$out" loss)" = "$val" ] ||
    fail "eval ($how) on 3 batches: $(field "$out" loss), the run's validation loss $val"
  echo "ok   $how: 3 batches give the run's validation loss $val"
done

whole=$("$STRATA_BIN" eval --checkpoint "$work/ckpt" --data "$work/val.bin" --quiet)
"$STRATA_BIN" export --checkpoint "$work/ckpt" --out "$work/hf/" 2>/dev/null
/usr/bin/python3 - "$whole" "$work/val.bin" <<'PY' || fail "counts or perplexity: $whole"
import json, math, os, sys
r = json.loads(sys.argv[1])
header = 256 * 4  # llm.c's token file: a 256-int32 header, then uint16 tokens
n = (os.path.getsize(sys.argv[2]) - header) // 2
assert r["batches"] == (n - 1) // (4 * 64) and r["tokens"] == r["batches"] * 256, (r, n)
assert r["perplexity"] == math.exp(r["loss"]), r
print(f"ok   the whole file: {r['batches']} batches, {r['tokens']} tokens, loss {r['loss']:.6f}, "
      f"perplexity {r['perplexity']:.3f}")
PY
/usr/bin/python3 "$STRATA_SOURCE_DIR/tools/torch_val_loss.py" "$work/hf/model.safetensors" \
  "$work/val.bin" 4 64 "$(field "$whole" batches)" "$(field "$whole" loss)" ||
  fail "PyTorch's loss over the whole file differs"
hf=$("$STRATA_BIN" eval --model "$work/hf" --data "$work/val.bin" --set train.seq_len=64 \
  --set train.batch_size=4 --quiet 2>"$work/hf.log") ||
  fail "eval --model: $(cat "$work/hf.log")"
[ "$(field "$hf" loss)" = "$(field "$whole" loss)" ] ||
  fail "eval --model $(field "$hf" loss), the checkpoint $(field "$whole" loss)"
echo "ok   --model on the exported directory gives the checkpoint's loss"

# refused ARGS... PATTERN: one line naming PATTERN, exit 2.
refused() {
  local pattern=${*: -1} status=0 err
  err=$("$STRATA_BIN" eval "${@:1:$#-1}" 2>&1 >/dev/null) || status=$?
  [ "$status" -eq 2 ] && [ "$(grep -c . <<<"$err")" -eq 1 ] && grep -q -- "$pattern" <<<"$err" ||
    fail "eval ${*:1:$#-1}: status $status, '$err' (wanted '$pattern')"
  echo "ok   refused: $err"
}
refused --data "$work/val.bin" "give --checkpoint DIR or --model HF_DIR"
refused --checkpoint "$work/ckpt" --model "$work/hf" --data "$work/val.bin" "one of them"
refused --checkpoint "$work/ckpt" "--data FILES"
refused --checkpoint "$work/ckpt" --data "$work/missing.bin" "missing.bin"
refused --checkpoint "$work/ckpt" --data "$work/val.bin" --batches 0 "--batches must be a positive"
refused --checkpoint "$work/ckpt" --data "$work/val.bin" --set model.n_layer=3 "model.n_layer"
refused --checkpoint "$work/nothing" --data "$work/val.bin" "nothing"
