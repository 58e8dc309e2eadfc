#!/usr/bin/env bash
# CTest `prepare_jsonl`: `strata prepare --in X.jsonl` (Note [Instruction data] in
# src/data/instruct.h, Note [Loss masks] in src/data/token_file.h). With the byte tokenizer the
# token file is the rendered text byte for byte, so it is checked against:
#  - the chat templates as published (chatml; Meta Llama 3 Instruct's), rendered by python3-jinja2
#    as Hugging Face's apply_chat_template renders them (bos_token, add_generation_prompt false);
#  - the mask: exactly the assistant turns' content and end markers, the completions, the texts;
#  - training on it reads the mask (the log and the metrics say how many targets train), `strata
#    eval` too, and its masked loss is PyTorch's with ignore_index on the exported model;
#  - bad examples are one line naming file:line and the field, exit 2, and leave no file.
set -uo pipefail
: "${STRATA_BIN:?}" "${STRATA_SOURCE_DIR:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/prepare_jsonl"
rm -rf "$work" && mkdir -p "$work"
fail() { echo "prepare_jsonl: FAILED: $*" >&2; exit 1; }

cat >"$work/chat.jsonl" <<'JSONL'
{"messages": [{"role": "system", "content": "You answer in one word."}, {"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "  Paris.\n"}]}
{"messages": [{"role": "user", "content": "Two plus two?"}, {"role": "assistant", "content": "Four."}, {"role": "user", "content": "And three?"}, {"role": "assistant", "content": "Five, says Orwell."}]}
JSONL
for template in chatml llama3; do
  "$STRATA_BIN" prepare --in "$work/chat.jsonl" --out "$work/$template.bin" \
    --chat-template "$template" 2>"$work/$template.log" || fail "$template: $(cat "$work/$template.log")"
  /usr/bin/python3 - "$work/chat.jsonl" "$work/$template.bin" "$template" <<'PY' || exit 1
import json, struct, sys
import jinja2
# The templates as their models publish them (tokenizer_config.json's chat_template).
TEMPLATES = {
    "chatml": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
              "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt "
              "%}{{ '<|im_start|>assistant\n' }}{% endif %}",
    "llama3": "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
              "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ "
              "message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content "
              "= bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if "
              "add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
              "{% endif %}",
}
END = {"chatml": "<|im_end|>", "llama3": "<|eot_id|>"}
jsonl, binary, name = sys.argv[1:]
env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)  # as transformers compiles them
template = env.from_string(TEMPLATES[name])
want_text, want_mask = "", ""
for line in open(jsonl):
    messages = json.loads(line)["messages"]
    rendered = template.render(messages=messages, bos_token="<|begin_of_text|>",
                               add_generation_prompt=False)
    want_text += rendered
    mask = ["_"] * len(rendered)
    at = 0
    for m in messages:  # each assistant turn's content (as rendered) and its end marker count
        content = m["content"].strip() if name == "llama3" else m["content"]
        at = rendered.index(m["role"], at)
        if m["role"] == "assistant":
            at = rendered.index(content + END[name], at)
            for i in range(at, at + len(content) + len(END[name])):
                mask[i] = rendered[i]
    want_mask += "".join(mask)
raw = open(binary, "rb").read()
n = struct.unpack("<i", raw[8:12])[0]
got_text = bytes(struct.unpack("<%dH" % n, raw[1024:])).decode()
bits = open(binary + ".mask", "rb").read()[1024:]
got_mask = "".join(c if bits[i] & 1 else "_" for i, c in enumerate(got_text))
# Bit 2 marks each example's first token (data.pack false makes a row of each).
starts = [i for i, b in enumerate(bits) if b & 2]
lines = [json.loads(l)["messages"] for l in open(jsonl)]
want_starts = [0, len(template.render(messages=lines[0], bos_token="<|begin_of_text|>"))]
if starts != want_starts:
    sys.exit(f"{name}: example starts {starts}, want {want_starts}")
if got_text != want_text:
    sys.exit(f"{name}: the tokens are not jinja2's rendering:\n{got_text!r}\n{want_text!r}")
if got_mask != want_mask:
    sys.exit(f"{name}: the mask is not the assistant turns:\n{got_mask!r}\n{want_mask!r}")
print(f"ok   {name}: {n} tokens equal jinja2's rendering; {sum(b & 1 for b in bits)} trained, the assistant turns")
PY
done

# prompt/completion and text: the prompt does not count, the rest does.
printf '%s\n' '{"prompt": "Q: 2+2? A:", "completion": " 4"}' '{"text": "free text"}' \
  >"$work/mixed.jsonl"
"$STRATA_BIN" prepare --in "$work/mixed.jsonl" --out "$work/mixed.bin" 2>/dev/null ||
  fail "mixed examples"
/usr/bin/python3 - "$work/mixed.bin" <<'PY' || exit 1
import sys
bits = open(sys.argv[1] + ".mask", "rb").read()[1024:]
want = [0] * len("Q: 2+2? A:") + [1] * len(" 4") + [1] * len("free text")
want[0] |= 2  # the examples' first tokens
want[len("Q: 2+2? A: 4")] |= 2
sys.exit(0 if list(bits) == want else f"mixed: mask {list(bits)}")
PY
echo "ok   prompt/completion and text: only the prompt is left out"

# Training and evaluation read the mask beside the token file.
for i in $(seq 40); do sed -n 2p "$work/chat.jsonl"; done >"$work/many.jsonl"
"$STRATA_BIN" prepare --in "$work/many.jsonl" --out "$work/many.bin" --chat-template chatml \
  2>/dev/null || fail "many"
tiny=(--set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2
      --set model.context_length=32 --set train.seq_len=32 --set train.batch_size=2)
"$STRATA_BIN" train "${tiny[@]}" --set train.steps=3 --set "data.train=$work/many.bin" \
  --save-every 3 --checkpoint-dir "$work/ck" --metrics "$work/metrics.jsonl" 2>"$work/train.log" ||
  fail "train: $(cat "$work/train.log")"
# Each step's trained_tokens are the mask's ones over the targets it read: tokens k*64+1 .. k*64+64.
/usr/bin/python3 - "$work/many.bin.mask" "$work/metrics.jsonl" <<'PY' || fail "trained_tokens"
import json, sys
bits = open(sys.argv[1], "rb").read()[1024:]
got = [json.loads(l)["trained_tokens"] for l in open(sys.argv[2])]
want = [sum(b & 1 for b in bits[k * 64 + 1:k * 64 + 65]) for k in range(3)]
sys.exit(0 if got == want else f"metrics trained_tokens {got}, the mask says {want}")
PY
counts=$(/usr/bin/python3 -c 'import sys; b = open(sys.argv[1], "rb").read()[1024:]
print(sum(x & 1 for x in b), "of", len(b))' "$work/many.bin.mask")
grep -q "loss mask: $counts tokens trained" "$work/train.log" ||
  fail "the log does not report the mask: $(grep 'data:' "$work/train.log")"
echo "ok   training reads the mask: $(grep -o 'loss mask: [^;]*' "$work/train.log")"

# eval: the same tokens give another loss without their mask (every target counted).
cp "$work/many.bin" "$work/unmasked.bin"
masked=$("$STRATA_BIN" eval --checkpoint "$work/ck" --data "$work/many.bin" --quiet 2>&1 | tail -1)
unmasked=$("$STRATA_BIN" eval --checkpoint "$work/ck" --data "$work/unmasked.bin" --quiet 2>&1 | tail -1)
/usr/bin/python3 - "$work/many.bin.mask" "$masked" "$unmasked" <<'PY' ||
import json, sys
bits = open(sys.argv[1], "rb").read()[1024:]
m, u = json.loads(sys.argv[2]), json.loads(sys.argv[3])
assert m["trained_tokens"] == sum(b & 1 for b in bits[1:m["tokens"] + 1]), m
assert u["trained_tokens"] == u["tokens"] and m["loss"] != u["loss"], (m, u)
PY
  fail "eval with and without the mask: $masked / $unmasked"
echo "ok   eval honours the mask: $masked vs unmasked $unmasked"
# Every target masked out: one line, exit 2 (not a loss of 0).
/usr/bin/python3 - "$work/many.bin.mask" "$work/none.bin.mask" <<'PY'
import sys
raw = bytearray(open(sys.argv[1], "rb").read())
for i in range(1024, len(raw)):
    raw[i] &= 2  # no token trained; example starts kept
open(sys.argv[2], "wb").write(raw)
PY
cp "$work/many.bin" "$work/none.bin"
status=0
err=$("$STRATA_BIN" eval --checkpoint "$work/ck" --data "$work/none.bin" 2>&1 >/dev/null) || status=$?
[ "$status" -eq 2 ] && [ "$(grep -c . <<<"$err")" -eq 1 ] && grep -q "leaves out every target" <<<"$err" ||
  fail "eval with every target masked: status $status, $err"
echo "ok   eval with every target masked: $err"
# PyTorch's masked loss (ignore_index -100, tools/torch_val_loss.py) on the exported weights.
"$STRATA_BIN" export --checkpoint "$work/ck" --out "$work/hf/" 2>/dev/null || fail "export"
loss=$(/usr/bin/python3 -c 'import json, sys; print(repr(json.loads(sys.argv[1])["loss"]))' "$masked")
batches=$(/usr/bin/python3 -c 'import json, sys; print(json.loads(sys.argv[1])["batches"])' "$masked")
/usr/bin/python3 "$STRATA_SOURCE_DIR/tools/torch_val_loss.py" "$work/hf/model.safetensors" \
  "$work/many.bin" 2 32 "$batches" "$loss" || fail "the masked eval loss is not PyTorch's"

# data.pack false: one example a row (Note [Example rows]); resumed bit for bit, shuffled.
rows=(--set data.pack=false --set data.shuffle=true --set "data.train=$work/many.bin" --set train.log_every=1)
"$STRATA_BIN" train "${tiny[@]}" "${rows[@]}" --set train.steps=4 --metrics "$work/rows.jsonl" \
  2>"$work/rows.log" || fail "rows: $(cat "$work/rows.log")"
grep -q "one example a row (data.pack false): 40 examples, 40 cut to train.seq_len + 1 tokens" \
  "$work/rows.log" || fail "the log does not say the rows: $(grep 'data:' "$work/rows.log")"
"$STRATA_BIN" train "${tiny[@]}" "${rows[@]}" --set train.steps=2 --save-every 2 \
  --checkpoint-dir "$work/ck_rows" --quiet 2>/dev/null || fail "rows, first half"
"$STRATA_BIN" train "${tiny[@]}" "${rows[@]}" --set train.steps=4 --resume "$work/ck_rows" \
  --metrics "$work/rows_resumed.jsonl" --quiet 2>/dev/null || fail "rows, resumed"
[ "$(grep -o '"loss": *[^,]*' "$work/rows.jsonl" | tail -2)" = \
  "$(grep -o '"loss": *[^,]*' "$work/rows_resumed.jsonl")" ] || fail "rows: the resumed losses differ"
echo "ok   data.pack false: one example a row, shuffled, resumed bit for bit"

expect_refused() {  # NAME PATTERN JSON_LINE [ARGS...]: one line, exit 2, no output file left
  local name=$1 pattern=$2 json=$3 err status
  shift 3
  printf '%s\n' '{"text": "fine"}' "$json" >"$work/bad.jsonl"
  err=$("$STRATA_BIN" prepare --in "$work/bad.jsonl" --out "$work/bad.bin" "$@" 2>&1 >/dev/null)
  status=$?
  if [ "$status" -ne 2 ] || [ "$(printf '%s\n' "$err" | grep -c .)" -ne 1 ] ||
    ! grep -qE -- "$pattern" <<<"$err" || ls "$work" | grep -q '^bad\.bin'; then
    fail "$name: status $status, wanted /$pattern/; got: $err; files: $(ls "$work" | grep bad)"
  fi
  echo "ok   $name: $err"
}
expect_refused no_template 'bad.jsonl:2: "messages" need a chat template: pass --chat-template' \
  '{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}'
expect_refused bad_role 'bad.jsonl:2: "messages"\[1\]: role "bot" is not system, user or assistant' \
  '{"messages": [{"role": "user", "content": "x"}, {"role": "bot", "content": "y"}]}' \
  --chat-template llama3
expect_refused no_content 'bad.jsonl:2: "messages"\[0\]: no "content"' \
  '{"messages": [{"role": "user"}]}' --chat-template chatml
expect_refused no_assistant 'bad.jsonl:2: no "assistant" message' \
  '{"messages": [{"role": "user", "content": "x"}]}' --chat-template chatml
expect_refused no_completion 'bad.jsonl:2: no "completion"' '{"prompt": "x"}'
expect_refused not_json 'bad.jsonl:2' '{"text": '
expect_refused unknown_shape 'bad.jsonl:2: an example has "text", "prompt" and "completion", or "messages"' \
  '{"input": "x"}'
expect_refused bad_template "--chat-template 'vicuna' is not a built-in template \(chatml, llama3\)" \
  '{"text": "x"}' --chat-template vicuna
echo "prepare_jsonl: passed"
