#!/usr/bin/env bash
# CTest `sample_output`: `strata sample` writes each token as it is made and fails loudly when it
# cannot (Note [Sample output] in src/cli/cmd_sample.cpp):
#  - into a full device (/dev/full): exit 1 and one line naming stdout (it used to exit 0);
#  - into a pipe whose reader leaves after 10 bytes (`| head -c 10`) while 1M tokens are asked
#    for: SIGPIPE stops it at once, exit 141 and one line naming the signal (it used to run on);
#  - streamed: the first new token is read from a FIFO while generation runs (it used to come only
#    after the last token); SIGINT then ends the run with exit 130, what was made written and
#    ended by a newline, and a line saying how many tokens were made;
#  - the text written piece by piece is the bytes of the ids --print-tokens gives, seeded.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/sample_output"
rm -rf "$work" && mkdir -p "$work"
fail() { echo "sample_output: FAILED: $*" >&2; exit 1; }

"$STRATA_BIN" train --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 \
  --set model.context_length=16 --set train.seq_len=16 --set train.batch_size=2 \
  --set train.steps=1 --save-every 1 --checkpoint-dir "$work/ckpt" --quiet 2>/dev/null
many=1048576  # the most --tokens allows: the runs below must end long before
sample() { "$STRATA_BIN" sample --checkpoint "$work/ckpt" --prompt-tokens "1 2" "$@"; }
one_line() { [ "$(printf '%s\n' "$1" | grep -c .)" -eq 1 ]; }

status=0
err=$(sample --tokens 20 2>&1 >/dev/full) || status=$?
[ "$status" -eq 1 ] && one_line "$err" && grep -q 'stdout: No space left on device' <<<"$err" ||
  fail "into /dev/full: exit $status, wanted 1 and one line naming stdout: $err"
echo "ok   /dev/full: exit 1, $err"

# The timeouts only bound a failure (the whole text written at the end, after minutes).
set +e
timeout 60 "$STRATA_BIN" sample --checkpoint "$work/ckpt" --prompt-tokens "1 2" --tokens "$many" \
  2>"$work/pipe.err" | head -c 10 >/dev/null
status=${PIPESTATUS[0]}
set -e
err=$(cat "$work/pipe.err")
[ "$status" -eq 141 ] && one_line "$err" && grep -q 'SIGPIPE' <<<"$err" ||
  fail "into a closed pipe: exit $status, wanted 141 and one line naming SIGPIPE: $err"
echo "ok   | head -c 10: exit 141, $err"

mkfifo "$work/fifo"
# Not through sample(): $! must be strata's own pid.
"$STRATA_BIN" sample --checkpoint "$work/ckpt" --prompt-tokens "1 2" --tokens "$many" \
  --print-tokens >"$work/fifo" 2>"$work/int.err" &
pid=$!
exec 3<"$work/fifo"
# "1 2 " is the prompt; the fifth byte is the first new token's, written only once it is made.
timeout 60 dd bs=1 count=5 status=none <&3 >"$work/first" ||
  { kill -KILL "$pid"; fail "no token read in 60 s: the output is not streamed"; }
kill -INT "$pid"
cat <&3 >"$work/rest"
exec 3<&-
set +e
wait "$pid"
status=$?
set -e
err=$(cat "$work/int.err")
out=$(cat "$work/first" "$work/rest")
made=$(($(wc -w <<<"$out") - 2))
[ "$status" -eq 130 ] || fail "SIGINT after the first token: exit $status, wanted 130: $err"
[ "$(tail -c 1 "$work/rest" | od -An -c | tr -d ' ')" = '\n' ] ||
  fail "the output stopped by SIGINT does not end with a newline"
[ "$made" -ge 1 ] && [ "$made" -lt "$many" ] && one_line "$err" &&
  grep -q "stopped by SIGINT after $made of $many tokens" <<<"$err" ||
  fail "stopped by SIGINT: $made tokens written, stderr: $err"
echo "ok   streamed: the first token read before the end; SIGINT: exit 130, $made tokens kept"

sample --tokens 64 --seed 3 >"$work/text"
sample --tokens 64 --seed 3 --print-tokens >"$work/ids"
/usr/bin/python3 - "$work/text" "$work/ids" <<'PY' || fail "the text is not the bytes of the ids"
import sys
text = open(sys.argv[1], "rb").read()
ids = [int(w) for w in open(sys.argv[2]).read().split()]
sys.exit(0 if len(ids) == 66 and text == bytes(ids) + b"\n" else 1)
PY
echo "ok   the text streamed is the bytes of the 66 ids"
