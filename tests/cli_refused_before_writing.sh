#!/usr/bin/env bash
# CTest `cli_refused_before_writing`: `strata train` checks every flag before it creates a file or
# takes a lock. A bad --trace, --report or checkpoint flag exits 2 with one line and leaves no
# metrics file and no checkpoint directory (whose .lock the run would hold) behind; those flags
# were once checked after the metrics file was opened and the checkpoint lock taken.
set -uo pipefail
: "${STRATA_BIN:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/cli_refused_before_writing"
rm -rf "$work" && mkdir -p "$work"
failures=0 passed=0

# expect_nothing_written NAME PATTERN ARGS...: exit status 2, one stderr line matching PATTERN,
# and neither $work/metrics.jsonl nor $work/ckpt afterwards. ARGS come after
# `train --set train.steps=1`.
expect_nothing_written() {
  local name=$1 pattern=$2
  shift 2
  rm -rf "$work/metrics.jsonl" "$work/ckpt"
  local err status lines
  err=$("$STRATA_BIN" train --set train.steps=1 "$@" 2>&1 >/dev/null)
  status=$?
  lines=$(printf '%s\n' "$err" | grep -c .)
  local left=""
  [ -e "$work/metrics.jsonl" ] && left+=" metrics.jsonl"
  [ -e "$work/ckpt" ] && left+=" ckpt/($(ls -A "$work/ckpt" | tr '\n' ' '))"
  if [ "$status" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -qE -- "$pattern" <<<"$err" ||
    [ -n "$left" ]; then
    echo "FAIL $name: status $status, $lines lines, wanted /$pattern/, left behind:${left:- nothing}; got: $err"
    failures=$((failures + 1))
  else
    echo "ok   $name: $err"
    passed=$((passed + 1))
  fi
}

outputs=(--metrics "$work/metrics.jsonl" --save-every 1 --checkpoint-dir "$work/ckpt")
# The default schedule keeps everything in memory: no trace of offloaded tasks to write.
expect_nothing_written trace_in_memory '--trace needs an offloaded schedule' \
  "${outputs[@]}" --trace "$work/trace.json"
expect_nothing_written report_without_metrics '--report needs --metrics FILE' \
  --save-every 1 --checkpoint-dir "$work/ckpt" --report "$work/report.html"
expect_nothing_written keep_negative "--keep must be a non-negative integer, got '-1'" \
  "${outputs[@]}" --keep -1
expect_nothing_written save_sync_alone '--save-sync needs --save-every N' \
  --metrics "$work/metrics.jsonl" --save-sync

# The same flags, good: the run writes both (so the checks above are not vacuous).
rm -rf "$work/metrics.jsonl" "$work/ckpt"
if "$STRATA_BIN" train --set train.steps=1 --quiet "${outputs[@]}" 2>"$work/good.log" &&
  [ -s "$work/metrics.jsonl" ] && [ -e "$work/ckpt/.lock" ]; then
  echo "ok   good_flags: metrics.jsonl and ckpt/.lock written"
  passed=$((passed + 1))
else
  echo "FAIL good_flags: $(cat "$work/good.log")"
  failures=$((failures + 1))
fi

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
