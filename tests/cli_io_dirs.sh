#!/usr/bin/env bash
# CTest `cli_io_dirs`: an offloaded run's io.dirs are checked before it creates anything (Note
# [Storage directories checked first] in src/io/storage_dirs.h). A regular file, /proc or a
# path under a file once failed with exit 1 and "cannot create the probe file" after the
# checkpoint lock and an empty metrics file had been made; now each is one line naming io.dirs,
# exit 2, nothing left behind. A missing directory (with {rank}, as in the README's mpirun
# example) once failed the same way; now it is created, as --checkpoint-dir is.
set -uo pipefail
: "${STRATA_BIN:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/cli_io_dirs"
rm -rf "$work" && mkdir -p "$work"
failures=0 passed=0

offload=(--set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2
         --set model.context_length=32 --set train.seq_len=32 --set train.batch_size=2
         --set train.steps=2 --set train.schedule=vertical --set offload.params_on_host=0
         --set offload.optim_on_host=0 --set optim.alpha=1 --quiet)
outputs=(--metrics "$work/metrics.jsonl" --save-every 1 --checkpoint-dir "$work/ckpt")

# expect_refused NAME DIR PATTERN: io.dirs=[DIR] exits 2 with one stderr line matching PATTERN
# and leaves neither the metrics file nor the checkpoint directory.
expect_refused() {
  local name=$1 dir=$2 pattern=$3
  rm -rf "$work/metrics.jsonl" "$work/ckpt"
  local err status lines left=""
  err=$("$STRATA_BIN" train "${offload[@]}" --set "io.dirs=[\"$dir\"]" "${outputs[@]}" 2>&1 \
    >/dev/null)
  status=$?
  lines=$(printf '%s\n' "$err" | grep -c .)
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

printf 'a file\n' >"$work/file"
expect_refused regular_file "$work/file" \
  "io.dirs entry $work/file is not a directory; io.dirs must be directories on writable storage"
expect_refused under_a_file "$work/file/store" "io.dirs entry $work/file/store: Not a directory"
expect_refused proc /proc "io.dirs entry /proc: cannot create a file in it"
if [ "$(id -u)" -ne 0 ]; then  # root writes whatever the mode says
  mkdir -p "$work/readonly" && chmod 0555 "$work/readonly"
  expect_refused unwritable "$work/readonly" \
    "io.dirs entry $work/readonly: cannot create a file in it \(Permission denied\)"
  expect_refused uncreatable "$work/readonly/store" \
    "io.dirs entry $work/readonly/store does not exist and cannot be created"
fi

# A missing directory, named with {rank}: made, and the run trains in it.
rm -rf "$work/metrics.jsonl" "$work/ckpt"
if "$STRATA_BIN" train "${offload[@]}" --set "io.dirs=[\"$work/nvme{rank}/strata\"]" \
  "${outputs[@]}" 2>"$work/missing.log" && [ -d "$work/nvme0/strata" ] &&
  [ -s "$work/metrics.jsonl" ]; then
  echo "ok   missing_created: $work/nvme0/strata made, the run trained"
  passed=$((passed + 1))
else
  echo "FAIL missing_created: $(cat "$work/missing.log")"
  failures=$((failures + 1))
fi

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
