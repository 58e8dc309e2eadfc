#!/usr/bin/env bash
# CTest `cli_outputs` (Note [Writing an output file] in src/core/output_file.h):
#  - `export`, `prepare` and `report` refuse an --out that is a FIFO, a symbolic link (its target
#    unchanged), a directory (a non-directory, for export's directory form) or a character
#    device, with one line naming it and exit 2, and leave everything as it was;
#  - two `prepare` runs to one --out at once both succeed, the file is whole (one run's tokens,
#    its header's count matching its size) and no temporary file is left.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/cli_outputs"
rm -rf "$work" && mkdir -p "$work/t"
small=(--set model.n_layer=2 --set model.n_embd=64 --set model.context_length=64
       --set train.seq_len=64 --set train.batch_size=4)
fail() { echo "cli_outputs: $*" >&2; exit 1; }

"$STRATA_BIN" train "${small[@]}" --set train.steps=2 --save-every 2 --checkpoint-dir "$work/ckpt" \
  --metrics "$work/metrics.jsonl" --quiet 2>"$work/train.log" || fail "train: $(cat "$work/train.log")"
python3 -c "print('the cat sat on the mat. ' * 400)" >"$work/text.txt"

t="$work/t"
mkfifo "$t/fifo"
echo "outside, unchanged" >"$work/outside.txt"
ln -s "$work/outside.txt" "$t/link"
mkdir "$t/dir"
touch "$t/file"
# A character device: our own node where we may make one (as root: never /dev/null itself, which
# a writer that replaced its --out would replace); else /dev/null, which we cannot replace.
if mknod "$t/null" c 1 3 2>/dev/null; then dev="$t/null"; else dev=/dev/null; fi
listing() { (cd "$t" && ls -la --time-style=+ | sed 1d | awk '{print $1, $NF}'; cat "$work/outside.txt"); }
before=$(listing)

# refuse NAME PATTERN ARGS...: exit 2, one line on stderr matching PATTERN, nothing changed.
refuse() {
  local name=$1 pattern=$2
  shift 2
  local err status
  set +e
  err=$(timeout 60 "$STRATA_BIN" "$@" 2>&1 >/dev/null)
  status=$?
  set -e
  [ "$status" -eq 2 ] || fail "$name: exit $status, expected 2: $err"
  [ "$(grep -c . <<<"$err")" -eq 1 ] || fail "$name: not one line: $err"
  grep -qE -- "$pattern" <<<"$err" || fail "$name: wanted /$pattern/, got: $err"
  [ "$(listing)" = "$before" ] || fail "$name changed the directory: $(listing)"
  echo "ok   $name: $err"
}

for cmd in export prepare report; do
  case $cmd in
    export) args=(export --checkpoint "$work/ckpt") ;;
    prepare) args=(prepare --in "$work/text.txt") ;;
    report) args=(report "$work/metrics.jsonl") ;;
  esac
  refuse "$cmd fifo" "$t/fifo is a FIFO" "${args[@]}" --out "$t/fifo"
  refuse "$cmd link" "$t/link is a symbolic link" "${args[@]}" --out "$t/link"
  refuse "$cmd device" "$dev is a character device" "${args[@]}" --out "$dev"
  if [ "$cmd" = export ]; then  # --out DIR is export's directory form: a non-directory is refused
    refuse "$cmd dir" "$t/file is a regular file; it must be a directory" "${args[@]}" --out "$t/file/"
  else
    refuse "$cmd dir" "$t/dir is a directory" "${args[@]}" --out "$t/dir"
  fi
done
# export's sidecar files get the same rule: a config.json that is a link is refused up front.
mkdir "$work/x" && ln -s "$work/outside.txt" "$work/x/config.json"
set +e
err=$("$STRATA_BIN" export --checkpoint "$work/ckpt" --out "$work/x/" 2>&1)
status=$?
set -e
[ "$status" -eq 2 ] && grep -q "$work/x/config.json is a symbolic link" <<<"$err" ||
  fail "export with config.json a link: exit $status: $err"
[ "$(ls -A "$work/x")" = "config.json" ] || fail "a refused export wrote: $(ls -A "$work/x")"
[ "$(cat "$work/outside.txt")" = "outside, unchanged" ] || fail "the link's target changed"
# And the ordinary case still works, replacing a regular file.
"$STRATA_BIN" export --checkpoint "$work/ckpt" --out "$work/y/" 2>/dev/null
"$STRATA_BIN" export --checkpoint "$work/ckpt" --out "$work/y/" 2>/dev/null
[ "$(ls -A "$work/y")" = "$(printf 'config.json\nmodel.safetensors')" ] ||
  fail "export left: $(ls -A "$work/y")"

# Two prepare runs to one --out at once, of texts of different sizes.
python3 -c "print('a dog ran. ' * 1000000)" >"$work/big1.txt"
python3 -c "print('the bird flew off. ' * 600000)" >"$work/big2.txt"
"$STRATA_BIN" prepare --in "$work/big1.txt" --out "$work/ref1.bin" 2>/dev/null
"$STRATA_BIN" prepare --in "$work/big2.txt" --out "$work/ref2.bin" 2>/dev/null
mkdir "$work/race"
for round in 1 2 3 4; do
  "$STRATA_BIN" prepare --in "$work/big1.txt" --out "$work/race/out.bin" 2>"$work/race/1.log" &
  p1=$!
  "$STRATA_BIN" prepare --in "$work/big2.txt" --out "$work/race/out.bin" 2>"$work/race/2.log" &
  p2=$!
  wait "$p1" || fail "round $round: the first prepare failed: $(cat "$work/race/1.log")"
  wait "$p2" || fail "round $round: the second prepare failed: $(cat "$work/race/2.log")"
  cmp -s "$work/race/out.bin" "$work/ref1.bin" || cmp -s "$work/race/out.bin" "$work/ref2.bin" ||
    fail "round $round: the file is neither run's tokens"
  [ "$(ls -A "$work/race")" = "$(printf '1.log\n2.log\nout.bin')" ] ||
    fail "round $round left: $(ls -A "$work/race")"
done
echo "ok   two prepare runs to one --out: each wrote a whole file, no temporary left"
