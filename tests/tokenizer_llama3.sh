#!/usr/bin/env bash
# CTest `tokenizer_llama3`: byte-level BPE with Llama 3's pre-tokenizer regex (which is GPT-4's),
# on GPT-4's cl100k_base vocabulary (100277 ids) from the npm package js-tiktoken that
# scripts/setup.sh installs under third_party/npm; js-tiktoken's encode() is the reference.
#  - tools/tokenizer_fixtures.js builds a tokenizer.json in Llama 3's layout: a Split on the
#    regex then ByteLevel, ignore_merges, merges as [a, b] pairs derived from the ranks.
#  - Pre-tokens equal those of the regex in JavaScript (/u flag), line by line and whole.
#  - Ids equal js-tiktoken's on the multilingual corpus, each line and whole, and decode back.
#  - strata prepare writes them as uint32 (llm.c version 2: the vocabulary is over 65536), also
#    for a text of 10 MB streamed in pieces.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_SOURCE_DIR:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/tokenizer_llama3"
rm -rf "$work" && mkdir -p "$work"
fail() { echo "tokenizer_llama3: FAILED: $*" >&2; exit 1; }
package="$STRATA_SOURCE_DIR/third_party/npm/node_modules/js-tiktoken"
[ -d "$package/dist/ranks" ] ||
  fail "$package is missing: run scripts/setup.sh (it installs the npm packages these tests read)"
check="$STRATA_BINARY_DIR/tests/tokenizer_check"
ref() { node "$STRATA_SOURCE_DIR/tools/tokenizer_reference.js" "$@"; }
corpus="$STRATA_SOURCE_DIR/tests/fixtures/tokenizer/corpus.txt"
tok="$work/tokenizer.json"

node "$STRATA_SOURCE_DIR/tools/tokenizer_fixtures.js" cl100k "$tok"

ref pretokens llama3 "$corpus" "$work/pre_ref.json"
"$check" pretokens llama3 "$corpus" "$work/pre.json"
ref compare "$work/pre_ref.json" "$work/pre.json" || fail "pre-tokens differ from Llama 3's regex"
echo "ok   pre-tokens equal Llama 3's regex (JavaScript, /u) on every line and the whole corpus"

ref encode cl100k "$corpus" "$work/ref.json"
"$check" ids "$tok" "$corpus" "$work/ids.json" || fail "ids do not decode back to the text"
ref compare "$work/ref.json" "$work/ids.json" || fail "ids differ from js-tiktoken's"
echo "ok   ids equal js-tiktoken's cl100k_base on every line and the whole corpus, and decode back"

"$STRATA_BIN" prepare --tokenizer "$tok" --in "$corpus" --out "$work/corpus.bin" 2>"$work/log"
ref bin "$work/corpus.bin" "$work/corpus.json"
grep -q '"version":2,' "$work/corpus.json" || fail "prepare did not write uint32 tokens"
[ "$(stat -c %s "$work/corpus.bin")" -eq $((1024 + 4 * $(grep -o ',' "$work/corpus.json" | wc -l))) ] ||
  fail "the file is not 1024 + 4n bytes"
ref compare "$work/ref.json" "$work/corpus.json" || fail "strata prepare's ids differ"

for _ in $(seq 2200); do cat "$corpus"; done >"$work/big.txt"
"$STRATA_BIN" prepare --tokenizer "$tok" --in "$work/big.txt" --out "$work/big.bin" 2>"$work/log"
"$check" ids "$tok" "$work/big.txt" "$work/big_whole.json" --whole-only --no-round-trip
ref bin "$work/big.bin" "$work/big.json"
ref compare "$work/big_whole.json" "$work/big.json" || fail "the streamed ids differ"
grep -Eq "uint32\) from 10\.[0-9] MB .*, [0-9]{3} pieces, " "$work/log" || fail "log: $(cat "$work/log")"
echo "ok   strata prepare writes them as uint32, also 10 MB streamed: $(sed 's/.*: //' "$work/log")"
