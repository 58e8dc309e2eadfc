#!/usr/bin/env bash
# CTest `base_model_files`: what a run imported with --init-from keeps of its base (Note [Base
# model] in src/formats/checkpoint.h). A random-weight Llama (tools/make_hf_fixture.py, vocabulary
# 320, bos 1 and eos 2 in config.json, a generation_config.json of its own) with a small
# byte-level BPE tokenizer.json and tokenizer_config.json beside it is fine-tuned 2 steps. Checked:
#  - `strata sample` of the checkpoint reads the base's tokenizer unasked: the prompt's ids are
#    the ones `strata prepare --tokenizer BASE` gives;
#  - `strata export` writes the base's generation_config.json and config.json fields back and
#    copies the tokenizer files byte for byte;
#  - the checkpoint carries a copy of the tokenizer files, listed in its manifest (Note [Checkpoint
#    tokenizer]); once the base has moved, sample reads that copy (the same prompt ids), a
#    resumed run's checkpoints carry it on, and export still writes the tokenizer files.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_SOURCE_DIR:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/base_model_files"
rm -rf "$work" && mkdir -p "$work"
fail() { echo "base_model_files: FAILED: $*" >&2; exit 1; }

/usr/bin/python3 "$STRATA_SOURCE_DIR/tools/make_hf_fixture.py" "$work/base" --arch llama \
  --dtype f32 --layers 1 --embd 32 --heads 4 --kv-heads 2 --ffn 64 --vocab 320 --ctx 64 --tokenizer
/usr/bin/python3 -c 'import json, sys
json.dump({"bos_token_id": 1, "eos_token_id": [2, 300], "max_new_tokens": 7}, open(sys.argv[1], "w"))' \
  "$work/base/generation_config.json"
"$STRATA_BIN" train --init-from "$work/base" --set train.steps=2 --set train.seq_len=32 \
  --set train.batch_size=2 --save-every 2 --checkpoint-dir "$work/ckpt" --quiet 2>"$work/train.log" ||
  fail "train: $(cat "$work/train.log")"

printf 'ab ab ab' >"$work/prompt.txt"
"$STRATA_BIN" prepare --tokenizer "$work/base" --in "$work/prompt.txt" --out "$work/prompt.bin" \
  2>/dev/null
want=$(od -An -tu2 -j1024 "$work/prompt.bin" | tr -s ' ' | sed 's/^ //')
ids=$("$STRATA_BIN" sample --checkpoint "$work/ckpt" --prompt "ab ab ab" --tokens 3 \
  --temperature 0 --print-tokens 2>"$work/sample.log") || fail "sample: $(cat "$work/sample.log")"
grep -q "tokenizer: the checkpoint's copy, $work/ckpt/step-00000002" "$work/sample.log" ||
  fail "sample did not say it read the checkpoint's tokenizer: $(cat "$work/sample.log")"
case "$ids" in "$want "*) ;; *) fail "sample's prompt ids '$ids', prepare's '$want'" ;; esac
echo "ok   sample reads the tokenizer the checkpoint carries: the prompt is $want"
for f in tokenizer.json tokenizer_config.json; do
  cmp -s "$work/base/$f" "$work/ckpt/step-00000002/$f" || fail "the checkpoint's $f is not the base's"
  grep -q "\"name\": \"$f\"" "$work/ckpt/step-00000002/manifest.json" ||
    fail "the manifest does not list $f"
done

"$STRATA_BIN" export --checkpoint "$work/ckpt" --out "$work/hf/" 2>"$work/export.log" ||
  fail "export: $(cat "$work/export.log")"
for f in tokenizer.json tokenizer_config.json; do
  cmp -s "$work/base/$f" "$work/hf/$f" || fail "export: $f is not the base's, byte for byte"
done
/usr/bin/python3 - "$work/base" "$work/hf" <<'PY' || fail "export: the base's config fields"
import json, os, sys
base, out = (json.load(open(os.path.join(d, "config.json"))) for d in sys.argv[1:3])
gen = json.load(open(os.path.join(sys.argv[2], "generation_config.json")))
want = json.load(open(os.path.join(sys.argv[1], "generation_config.json")))
assert gen == want, (gen, want)
assert all(out.get(k) == base[k] for k in ("bos_token_id", "eos_token_id", "torch_dtype")), out
print(f"ok   the export keeps the base's generation_config.json {gen} and special token ids")
PY

mv "$work/base" "$work/moved"
"$STRATA_BIN" train --resume "$work/ckpt" --set train.steps=3 --save-every 1 \
  --checkpoint-dir "$work/ckpt" --quiet 2>"$work/resume.log" || fail "resume: $(cat "$work/resume.log")"
ids=$("$STRATA_BIN" sample --checkpoint "$work/ckpt" --prompt "ab ab ab" --tokens 3 \
  --temperature 0 --print-tokens 2>"$work/sample2.log") || fail "sample: $(cat "$work/sample2.log")"
grep -q "tokenizer: the checkpoint's copy, $work/ckpt/step-00000003" "$work/sample2.log" ||
  fail "after the base moved: $(cat "$work/sample2.log")"
case "$ids" in "$want "*) ;; *) fail "after the base moved, the prompt ids '$ids'" ;; esac
"$STRATA_BIN" export --checkpoint "$work/ckpt" --out "$work/hf2/" 2>/dev/null || fail "export 2"
cmp -s "$work/moved/tokenizer.json" "$work/hf2/tokenizer.json" || fail "export 2: tokenizer.json"
echo "ok   the base moved: a resumed run's checkpoint still carries the tokenizer; sample and export read it"
