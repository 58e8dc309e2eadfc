#!/usr/bin/env bash
# CTest `cli_data_shrinks`: a token file cut short under a running job (Note [Reading token
# files] in src/data/token_file.h) stops it with one line naming the file and exit status 1 (a
# failure while running), not a SIGBUS (exit 135, no message, the store left behind, as when the
# file was mapped); the store is removed.
set -uo pipefail
: "${STRATA_BIN:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/cli_data_shrinks"
rm -rf "$work" && mkdir -p "$work/store"
fail() { echo "cli_data_shrinks: $*" >&2; exit 1; }
# 400k uint16 tokens in llm.c's format (version 1), ids below 512.
/usr/bin/python3 - "$work/train.bin" <<'PY'
import struct, sys
n = 400_000
header = struct.pack("<3i", 20240520, 1, n) + bytes(1024 - 12)
with open(sys.argv[1], "wb") as f:
    f.write(header + struct.pack(f"<{n}H", *(i * 7 % 512 for i in range(n))))
PY
"$STRATA_BIN" train --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 \
  --set model.vocab_size=512 --set model.context_length=32 --set train.seq_len=32 \
  --set train.batch_size=2 --set train.steps=100000 --set train.schedule=horizontal \
  --set offload.params_on_host=0 --set "io.dirs=[\"$work/store\"]" \
  --set "data.train=\"$work/train.bin\"" --metrics "$work/m.jsonl" --quiet 2>"$work/log" &
pid=$!
# The run is reading the file once its first steps are in the metrics.
for _ in $(seq 600); do
  [ "$(cat "$work/m.jsonl" 2>/dev/null | wc -l)" -ge 3 ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
[ "$(wc -l <"$work/m.jsonl")" -ge 3 ] || { kill "$pid"; fail "the run made no steps: $(cat "$work/log")"; }
truncate -s $((1024 + 2 * 100)) "$work/train.bin"
for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && { kill -9 "$pid"; fail "the run went on for 60 s on a file cut short"; }
wait "$pid"
code=$?
[ "$code" -eq 1 ] || fail "exit status $code, expected 1: $(cat "$work/log")"
grep -q "^strata: error: training stopped: .*data file $work/train.bin shrank while in use" \
  "$work/log" || fail "the error does not name the file: $(cat "$work/log")"
[ "$(grep -c '^strata: error' "$work/log")" -eq 1 ] || fail "not one error line: $(cat "$work/log")"
[ -z "$(ls -A "$work/store")" ] || fail "the store was left: $(ls -A "$work/store")"
echo "ok: exit 1 naming the file that shrank; the store removed"
