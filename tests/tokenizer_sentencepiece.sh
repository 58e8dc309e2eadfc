#!/usr/bin/env bash
# CTest `tokenizer_sentencepiece`: SentencePiece models through libsentencepiece, against
# Python's sentencepiece (Debian python3-sentencepiece) as the reference.
#  - spm_train (Debian sentencepiece) trains a BPE and a unigram model on the multilingual corpus,
#    with byte fallback and an identity normalizer.
#  - Ids equal Python's on every line and the whole corpus, and decode back to the text.
#  - strata prepare writes the same ids, also for 5 MB of text: the BPE model's streamed in
#    pieces, the unigram model's whole (Note [Streaming cuts]).
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_SOURCE_DIR:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/tokenizer_sentencepiece"
rm -rf "$work" && mkdir -p "$work"
fail() { echo "tokenizer_sentencepiece: FAILED: $*" >&2; exit 1; }
command -v spm_train >/dev/null || fail "spm_train is missing: run scripts/setup.sh (sentencepiece)"
/usr/bin/python3 -c 'import sentencepiece' 2>/dev/null ||
  fail "Python's sentencepiece is missing: run scripts/setup.sh (python3-sentencepiece)"
check="$STRATA_BINARY_DIR/tests/tokenizer_check"
ref() { node "$STRATA_SOURCE_DIR/tools/tokenizer_reference.js" "$@"; }
corpus="$STRATA_SOURCE_DIR/tests/fixtures/tokenizer/corpus.txt"

# python_ids MODEL TEXT OUT.json [whole]: {"whole": ids, "lines": [ids of each line, with its
# "\n"]} from Python's sentencepiece; "whole" leaves the lines out.
python_ids() {
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
import sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
text = open(sys.argv[2], encoding="utf-8", newline="").read()
out = {"whole": sp.encode(text)}
if len(sys.argv) < 5:
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    out["lines"] = [sp.encode(line) for line in lines]
json.dump(out, open(sys.argv[3], "w"))
PY
}

for _ in $(seq 1100); do cat "$corpus"; done >"$work/big.txt"
for type in bpe unigram; do
  spm_train --input="$corpus" --model_prefix="$work/$type" --model_type=$type --vocab_size=1200 \
    --hard_vocab_limit=false --byte_fallback=true --character_coverage=0.98 \
    --normalization_rule_name=identity --remove_extra_whitespaces=false --num_threads=1 \
    --minloglevel=2 >/dev/null 2>&1 || fail "spm_train $type failed"
  model="$work/$type.model"
  python_ids "$model" "$corpus" "$work/${type}_ref.json"
  "$check" ids "$model" "$corpus" "$work/$type.json" || fail "$type: ids do not decode back"
  ref compare "$work/${type}_ref.json" "$work/$type.json" || fail "$type: ids differ from Python's"
  echo "ok   $type: ids equal Python sentencepiece's on every line and the whole corpus, and decode back"

  "$STRATA_BIN" prepare --tokenizer "$model" --in "$work/big.txt" --out "$work/$type.bin" 2>"$work/log"
  python_ids "$model" "$work/big.txt" "$work/${type}_big_ref.json" whole
  ref bin "$work/$type.bin" "$work/${type}_big.json"
  ref compare "$work/${type}_big_ref.json" "$work/${type}_big.json" || fail "$type: prepare's ids differ"
  pieces=$(sed -n 's/.*, \([0-9]*\) pieces,.*/\1/p' "$work/log")
  if [ $type = bpe ]; then [ "$pieces" -gt 1 ]; else [ "$pieces" -eq 1 ]; fi ||
    fail "$type: encoded in $pieces pieces: $(cat "$work/log")"
  echo "ok   $type: strata prepare writes Python's ids for 5 MB of text, in $pieces pieces"
done
