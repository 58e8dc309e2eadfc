#!/usr/bin/env bash
# CTest `cli_sharded_data`: data.train as shards (Note [Sharded corpora] in
# src/data/dataloader.h, Note [Token file lists] in src/data/token_paths.h). Checked:
#  - a glob and the same files as a comma list train bit-identically (the glob sorts);
#  - with data.shuffle the run reads other batches than in order, and a run checkpointed at
#    step 3 and resumed to step 8 (past an epoch's end, so the next epoch's draw is in it) gives
#    the losses of the run that went straight through, bit for bit;
#  - resuming with data.shuffle or, shuffled, train.seed changed is refused naming the field;
#  - `strata eval --data GLOB` reads every file's whole batches once;
#  - a glob matching nothing and a shard too small for a batch are one line and exit 2.
set -uo pipefail
: "${STRATA_BIN:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/cli_sharded_data"
rm -rf "$work" && mkdir -p "$work"
fail() { echo "cli_sharded_data: FAILED: $*" >&2; exit 1; }

# Three shards of different sizes: 5, 3 and 4 batches of 2 x 32 tokens (byte tokens).
for k in 1 2 3; do
  /usr/bin/python3 - "$work/shard_$k.txt" "$k" <<'PY'
import random, sys
k = int(sys.argv[2]); random.seed(k)
words = ["shard%d" % k, "tokens", "in", "order", "or", "shuffled", "per", "epoch"]
text = ""
while len(text) < [0, 330, 200, 270][k]:
    text += random.choice(words) + " "
open(sys.argv[1], "w").write(text[:[0, 330, 200, 270][k]])
PY
  "$STRATA_BIN" prepare --in "$work/shard_$k.txt" --out "$work/train_00$k.bin" 2>/dev/null ||
    fail "prepare shard $k"
done
tiny=(--set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2
      --set model.context_length=32 --set train.seq_len=32 --set train.batch_size=2
      --set train.grad_accum=2 --set train.log_every=1)
# losses FILE: the metrics' losses, one per line, as written.
losses() { grep -o '"loss": *[^,}]*' "$1"; }
run() {  # run NAME ARGS...: a training run writing $work/NAME.jsonl
  local name=$1
  shift
  "$STRATA_BIN" train "${tiny[@]}" --metrics "$work/$name.jsonl" --quiet "$@" \
    2>"$work/$name.log" || fail "$name: $(cat "$work/$name.log")"
}

run glob --set train.steps=4 --set "data.train=$work/train_*.bin"
run list --set train.steps=4 \
  --set "data.train=$work/train_001.bin,$work/train_002.bin,$work/train_003.bin"
[ "$(losses "$work/glob.jsonl")" = "$(losses "$work/list.jsonl")" ] ||
  fail "the glob and the list trained differently"
grep -q "data: 3 files (.*train_001.bin ... .*train_003.bin), 800 tokens" "$work/glob.log" ||
  fail "the log does not name the files: $(grep data: "$work/glob.log")"

# In order, shards are one stream: three shards cut from one file at batch boundaries (each
# holding the next one's first token, the last target of its last batch) train as that file.
/usr/bin/python3 - "$work" <<'PY'
import struct, sys
work = sys.argv[1]
raw = open(f"{work}/train_001.bin", "rb").read() + open(f"{work}/train_003.bin", "rb").read()
tokens = list(struct.unpack("<330H", raw[1024:1024 + 660])) + list(struct.unpack("<270H", raw[2708:]))
def write(path, t):
    open(path, "wb").write(struct.pack("<256i", 20240520, 1, len(t), *[0] * 253) +
                           struct.pack("<%dH" % len(t), *t))
write(f"{work}/whole.bin", tokens[:577])  # 9 batches of 64, and the last target
for k, (a, b) in enumerate(((0, 193), (192, 385), (384, 577))):  # 3 batches each
    write(f"{work}/cut_{k}.bin", tokens[a:b])
PY
run whole --set train.steps=4 --set "data.train=$work/whole.bin"
run cut --set train.steps=4 --set "data.train=$work/cut_*.bin"
[ "$(losses "$work/whole.jsonl")" = "$(losses "$work/cut.jsonl")" ] ||
  fail "three shards cut from a file trained otherwise than the file"
echo "ok   in order, 3 shards cut from one file train as the file"
# Resumed in order across a shard boundary: the checkpoint is one batch into train_002, and the
# resumed step 5 reads on into train_003.
run in_order --set train.steps=6 --set "data.train=$work/train_*.bin"
run in_order_first --set train.steps=3 --set "data.train=$work/train_*.bin" --save-every 3 \
  --checkpoint-dir "$work/ck_in_order"
run in_order_resumed --set train.steps=6 --set "data.train=$work/train_*.bin" \
  --resume "$work/ck_in_order"
[ "$(losses "$work/in_order.jsonl" | tail -3)" = "$(losses "$work/in_order_resumed.jsonl")" ] ||
  fail "in order, the resumed run's losses differ"
echo "ok   in order, resumed at step 3 of 6 across a shard boundary: bit-identical"

shuffled=(--set "data.train=$work/train_*.bin" --set data.shuffle=true --set train.seed=5)
run straight --set train.steps=8 "${shuffled[@]}"
[ "$(losses "$work/straight.jsonl" | head -4)" != "$(losses "$work/glob.jsonl")" ] ||
  fail "the shuffled run read the batches in order"
run first --set train.steps=3 "${shuffled[@]}" --save-every 3 --checkpoint-dir "$work/ck"
run resumed --set train.steps=8 "${shuffled[@]}" --resume "$work/ck"
[ "$(losses "$work/straight.jsonl" | tail -5)" = "$(losses "$work/resumed.jsonl")" ] ||
  fail "the resumed run's losses differ: $(losses "$work/straight.jsonl" | tail -5) vs $(losses "$work/resumed.jsonl")"
echo "ok   shuffled, resumed at step 3 of 8 (2 batches a step, 12 an epoch): bit-identical"

# expect_refused NAME PATTERN ARGS...: `strata ARGS` exits 2 with one line matching PATTERN.
expect_refused() {
  local name=$1 pattern=$2 err status
  shift 2
  err=$("$STRATA_BIN" "$@" 2>&1 >/dev/null)
  status=$?
  if [ "$status" -ne 2 ] || [ "$(printf '%s\n' "$err" | grep -c .)" -ne 1 ] ||
    ! grep -qE -- "$pattern" <<<"$err"; then
    fail "$name: status $status, wanted /$pattern/; got: $err"
  fi
  echo "ok   $name: $err"
}
expect_refused unshuffled 'data.shuffle true -> false would read other tokens' \
  train "${tiny[@]}" --set train.steps=8 "${shuffled[@]}" --set data.shuffle=false --resume "$work/ck"
expect_refused reseeded 'train.seed 5 -> 6 would read other tokens.*--allow-changes train.seed$' \
  train "${tiny[@]}" --set train.steps=8 "${shuffled[@]}" --set train.seed=6 --resume "$work/ck"
expect_refused no_match "data.train: no file matches '.*fineweb_\*.bin'" \
  train "${tiny[@]}" --set "data.train=$work/fineweb_*.bin"
head -c 1100 "$work/train_001.bin" >"$work/small.bin"
/usr/bin/python3 - "$work/small.bin" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read()); b[8:12] = struct.pack("<i", 38)
open(sys.argv[1], "wb").write(b)
PY
expect_refused small_shard "data file .*small.bin: 38 tokens are too few for one batch of 2x32" \
  train "${tiny[@]}" --set "data.train=$work/train_001.bin,$work/small.bin"

out=$("$STRATA_BIN" eval --checkpoint "$work/ck" --data "$work/train_*.bin" --quiet 2>&1) ||
  fail "eval: $out"
grep -q '"batches": 12, "tokens": 768' <<<"$(tail -1 <<<"$out")" ||
  fail "eval over the shards: $out"
echo "ok   eval over 3 files: 12 batches"
echo "cli_sharded_data: passed"
