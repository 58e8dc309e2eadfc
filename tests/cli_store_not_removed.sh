#!/usr/bin/env bash
# CTest `cli_store_not_removed`: a store file that cannot be removed when the run ends is reported
# (a warning naming it and why), not left behind in silence: the run's store is replaced, while
# it trains, by a non-empty directory of the same name, which unlink cannot remove; then SIGTERM
# ends the run.
set -uo pipefail
: "${STRATA_BIN:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/cli_store_not_removed"
rm -rf "$work" && mkdir -p "$work/store"
fail() { echo "cli_store_not_removed: $*" >&2; exit 1; }
"$STRATA_BIN" train --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 \
  --set model.context_length=32 --set train.seq_len=32 --set train.batch_size=2 \
  --set train.steps=1000000 --set train.schedule=horizontal --set offload.params_on_host=0 \
  --set "io.dirs=[\"$work/store\"]" --metrics "$work/m.jsonl" --quiet 2>"$work/log" &
pid=$!
for _ in $(seq 600); do
  [ -s "$work/m.jsonl" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
store="$work/store/strata.store"
[ -f "$store" ] || { kill "$pid"; fail "no store at $store: $(cat "$work/log")"; }
mv "$store" "$work/moved.store" && mkdir "$store" && touch "$store/keep"
kill -TERM "$pid"
wait "$pid"
code=$?
[ "$code" -eq 143 ] || fail "exit status $code, expected 143 (SIGTERM): $(cat "$work/log")"
grep -q "^strata: warning: cannot remove the store file $store: .*remove it by hand" "$work/log" ||
  fail "no warning names the store: $(cat "$work/log")"
echo "ok: the store that could not be removed is named in a warning"
