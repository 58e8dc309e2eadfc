#!/usr/bin/env bash
# CTest `tokenizer_cli`: strata prepare --tokenizer on small tokenizer.json files written here.
#  - The byte tokenizer stays the default; a tokenizer directory is read by its tokenizer.json.
#  - Bad input exits 2 with one line naming the file (and the field): a missing tokenizer, bad
#    JSON, an unsupported pre-tokenizer, a merge naming an unknown token, a missing text file,
#    an empty one, an unknown flag.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/tokenizer_cli"
rm -rf "$work" && mkdir -p "$work/dir"
fail() { echo "tokenizer_cli: FAILED: $*" >&2; exit 1; }

# A byte-level BPE over the bytes ! to ~ and Ġ (space), Ċ (newline): the others are missing,
# which the "no token for byte" case below needs; the good file adds them all.
tokenizer_json() {  # pattern-json merges-json extra-vocab-json
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs = bs[:]
n = 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
vocab = {chr(c): b for b, c in zip(bs, cs)}
vocab.update(json.loads(sys.argv[3]))
print(json.dumps({"normalizer": None, "pre_tokenizer": json.loads(sys.argv[1]),
                  "added_tokens": [{"id": 300, "content": "<|eot|>", "special": True}],
                  "model": {"type": "BPE", "vocab": vocab, "merges": json.loads(sys.argv[2])}}))
PY
}
bytelevel='{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}'
tokenizer_json "$bytelevel" '["a b", "Ġ ab"]' '{"ab": 256, "Ġab": 257}' >"$work/dir/tokenizer.json"
printf 'ab ab<|eot|>' >"$work/in.txt"

"$STRATA_BIN" prepare --in "$work/in.txt" --out "$work/byte.bin" 2>"$work/log"
grep -q "prepare: byte: .* 12 tokens (uint16)" "$work/log" || fail "byte default: $(cat "$work/log")"
"$STRATA_BIN" prepare --tokenizer "$work/dir" --in "$work/in.txt" --out "$work/bpe.bin" 2>"$work/log"
grep -q "BPE (gpt2 pattern, vocab 301) $work/dir/tokenizer.json: .* 9 tokens (uint16)" "$work/log" ||
  fail "bpe: $(cat "$work/log")"
"$STRATA_BIN" prepare --tokenizer "$work/dir" --special-tokens --in "$work/in.txt" \
  --out "$work/bpe.bin" 2>"$work/log"
grep -q " 3 tokens (uint16)" "$work/log" || fail "special tokens: $(cat "$work/log")"
[ "$(od -An -tu2 -j1024 "$work/bpe.bin" | tr -s ' ')" = " 256 257 300" ] ||
  fail "ids: $(od -An -tu2 -j1024 "$work/bpe.bin")"
echo "ok   the byte tokenizer by default, a tokenizer directory, --special-tokens"

# expect_refusal WHAT PATTERN ARGS...: exit 2, one line on stderr matching PATTERN.
expect_refusal() {
  local what=$1 pattern=$2 rc=0
  shift 2
  "$STRATA_BIN" prepare "$@" >"$work/out" 2>"$work/err" || rc=$?
  [ $rc -eq 2 ] || fail "$what: exit $rc, not 2: $(cat "$work/err")"
  [ "$(wc -l <"$work/err")" -eq 1 ] || fail "$what: not one line: $(cat "$work/err")"
  grep -Eq "^strata: error: $pattern" "$work/err" || fail "$what: $(cat "$work/err")"
}
run() { expect_refusal "$1" "$2" --in "$work/in.txt" --out "$work/x.bin" --tokenizer "$3"; }

run "missing tokenizer" "tokenizer $work/none.json does not exist" "$work/none.json"
printf '{"model": {"vocab": ' >"$work/bad.json"
run "bad JSON" "tokenizer $work/bad.json is not valid JSON: line 1" "$work/bad.json"
tokenizer_json '{"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Isolated"}' '[]' '{}' \
  >"$work/split.json"
run "pre-tokenizer" "tokenizer $work/split.json: pre_tokenizer.type is \"Split\"" "$work/split.json"
tokenizer_json '{"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Isolated"}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]}' \
  '[]' '{}' >"$work/regex.json"
run "regex" "tokenizer $work/regex.json: pre_tokenizer.pretokenizers\[0\].pattern.Regex is not one of the supported patterns" \
  "$work/regex.json"
tokenizer_json "$bytelevel" '["a b", "a z"]' '{"ab": 256}' >"$work/merge.json"
run "merge" "tokenizer $work/merge.json: model.merges\[1\] \"a z\" names \"az\", which is not in model.vocab" \
  "$work/merge.json"
/usr/bin/python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); del j["model"]["vocab"]["Ċ"]; json.dump(j, open(sys.argv[2], "w"))' \
  "$work/dir/tokenizer.json" "$work/nonl.json"
run "byte" "tokenizer $work/nonl.json: model.vocab has no token for byte 0x0A" "$work/nonl.json"
printf 'not a model' >"$work/x.model"
run "sentencepiece" "tokenizer $work/x.model is not a SentencePiece model" "$work/x.model"
expect_refusal "missing text" "text file $work/none.txt does not exist" --in "$work/none.txt" \
  --out "$work/x.bin" --tokenizer "$work/dir"
: >"$work/empty.txt"
expect_refusal "empty text" "text file $work/empty.txt is empty" --in "$work/empty.txt" \
  --out "$work/x.bin" --tokenizer "$work/dir"
expect_refusal "flag" ".*--vocab" --in "$work/in.txt" --out "$work/x.bin" --vocab x
[ ! -e "$work/x.bin" ] && ! ls -A "$work" | grep -q "x.bin.tmp" || fail "a refused prepare left a file"
echo "ok   bad tokenizers and texts exit 2 with one line naming the file and field"
