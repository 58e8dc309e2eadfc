#!/usr/bin/env bash
# CTest `readme_walkthrough`: the README's "Fine-tune a Hugging Face model, step by step" runs as
# written. Its commands (between the walkthrough markers) are taken from README.md, its `model=`
# and `store=` lines pointed at a small generated Llama with a tokenizer (tools/make_hf_fixture.py)
# and a scratch store, ./build/strata at the binary under test, and run in order in a directory
# holding a generated chat.jsonl (user and assistant turns) and val.txt. Checked: every command exits 0; the two evals print
# a finite loss and the fine-tuned one is lower; the checkpoints are at steps 30, 60 and 90; the
# sample starts with the prompt; the adapter and the merged model are written.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_SOURCE_DIR:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/readme_walkthrough"
rm -rf "$work" && mkdir -p "$work/run" "$work/store"
fail() { echo "readme_walkthrough: FAILED: $*" >&2; exit 1; }

block=$(sed -n '/^<!-- walkthrough:/,/^<!-- end of walkthrough -->/p' "$STRATA_SOURCE_DIR/README.md" |
  sed -n '/^```sh$/,/^```$/p' | sed '1d;$d')
[ -n "$block" ] || fail "README.md has no walkthrough block between its markers"
grep -q '^model=' <<<"$block" && grep -q '^store=' <<<"$block" ||
  fail "the walkthrough no longer sets model= and store= on lines of their own"
script=$(sed -e "s|^model=.*|model=$work/model|" -e "s|^store=.*|store=$work/store|" \
  -e "s|\./build/strata |\"\$STRATA_BIN\" |g" <<<"$block")

/usr/bin/python3 "$STRATA_SOURCE_DIR/tools/make_hf_fixture.py" "$work/model" --arch llama \
  --dtype bf16 --layers 2 --embd 64 --heads 4 --kv-heads 2 --ffn 128 --vocab 320 --ctx 256 \
  --tokenizer
/usr/bin/python3 - "$work/run" <<'PY'
import json, os, random, sys
random.seed(11)
words = "the meaning of life is to learn a small model on a fast disk and ab".split()
say = lambda n: " ".join(random.choice(words) for _ in range(n))
with open(os.path.join(sys.argv[1], "val.txt"), "w") as f:
    f.write(say(4000) + "\n")
with open(os.path.join(sys.argv[1], "chat.jsonl"), "w") as f:
    for _ in range(400):
        messages = [{"role": "user", "content": say(20)}, {"role": "assistant", "content": say(80)}]
        f.write(json.dumps({"messages": messages}) + "\n")
PY

(cd "$work/run" && STRATA_BIN="$STRATA_BIN" bash -euo pipefail -c "$script") \
  >"$work/out.txt" 2>"$work/log.txt" || {
  tail -5 "$work/log.txt" >&2
  fail "a walkthrough command failed (above)"
}
/usr/bin/python3 - "$work/out.txt" <<'PY' || fail "the evals: $(grep loss "$work/out.txt")"
import json, math, sys
evals = [json.loads(l) for l in open(sys.argv[1], errors="replace") if l.startswith('{"loss"')]
assert len(evals) == 2 and all(math.isfinite(e["loss"]) for e in evals), evals
before, after = evals[0]["loss"], evals[1]["loss"]
assert after < before, (before, after)
print(f"ok   eval: loss {before:.4f} before fine-tuning, {after:.4f} after")
PY
for s in 30 60 90; do
  [ -f "$work/run/ckpt/step-000000$s/manifest.json" ] || fail "no checkpoint at step $s"
done
grep -q "^The meaning of life is" "$work/out.txt" || fail "the sample: $(cat "$work/out.txt")"
for f in adapter/adapter_model.safetensors adapter/adapter_config.json merged/model.safetensors \
  merged/config.json merged/generation_config.json merged/tokenizer.json; do
  [ -f "$work/run/$f" ] || fail "the exports: no $f"
done
echo "ok   the README's walkthrough ran: checkpoints at 30, 60, 90; sample; adapter; merged model"
