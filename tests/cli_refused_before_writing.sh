#!/usr/bin/env bash
# CTest `cli_refused_before_writing`: `strata train` checks every flag before it creates a file or
# takes a lock. A bad --trace, --report or checkpoint flag exits 2 with one line and leaves no
# metrics file and no checkpoint directory (whose .lock the run would hold) behind; those flags
# were once checked after the metrics file was opened and the checkpoint lock taken.
# So are an offloaded run's io.dirs (Note [Storage directories checked first] in
# src/io/storage_dirs.h): a regular file, /proc or a path under a file once failed with exit 1
# and "cannot create the probe file" after the lock and an empty metrics file existed. A missing
# directory (with {rank}, as in the README's mpirun example) is created, as --checkpoint-dir is.
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

offload=(--set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2
         --set model.context_length=32 --set train.seq_len=32 --set train.batch_size=2
         --set train.steps=2 --set train.schedule=vertical --set offload.params_on_host=0
         --set offload.optim_on_host=0 --set optim.alpha=1 --quiet)
# io_dirs_refused NAME DIR PATTERN: io.dirs=[DIR] is refused before anything is written.
io_dirs_refused() {
  expect_nothing_written "io_dirs_$1" "$3" "${offload[@]}" --set "io.dirs=[\"$2\"]" "${outputs[@]}"
}
printf 'a file\n' >"$work/file"
io_dirs_refused regular_file "$work/file" \
  "io.dirs entry $work/file is not a directory; io.dirs must be directories on writable storage"
io_dirs_refused under_a_file "$work/file/store" "io.dirs entry $work/file/store: Not a directory"
io_dirs_refused proc /proc "io.dirs entry /proc: cannot create a file in it"
if [ "$(id -u)" -ne 0 ]; then  # root writes whatever the mode says
  mkdir -p "$work/readonly" && chmod 0555 "$work/readonly"
  io_dirs_refused unwritable "$work/readonly" \
    "io.dirs entry $work/readonly: cannot create a file in it \(Permission denied\)"
  io_dirs_refused uncreatable "$work/readonly/store" \
    "io.dirs entry $work/readonly/store does not exist and cannot be created"
fi

# A missing io.dirs directory, named with {rank}: made, and the run trains in it.
rm -rf "$work/metrics.jsonl" "$work/ckpt"
if "$STRATA_BIN" train "${offload[@]}" --set "io.dirs=[\"$work/nvme{rank}/strata\"]" \
  "${outputs[@]}" 2>"$work/missing.log" && [ -d "$work/nvme0/strata" ] &&
  [ -s "$work/metrics.jsonl" ]; then
  echo "ok   io_dirs_missing_created: $work/nvme0/strata made, the run trained"
  passed=$((passed + 1))
else
  echo "FAIL io_dirs_missing_created: $(cat "$work/missing.log")"
  failures=$((failures + 1))
fi

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
