#!/usr/bin/env bash
# CTest `dist_mpi`: data parallel over MPI (Note [Data parallel ranks] in src/dist/communicator.h),
# with OpenMPI's mpirun on this machine (shared memory between the ranks).
#  1. Equivalence: N ranks x M micro-batches each end where 1 rank x N*M micro-batches ends:
#     every tensor of the weights and both AdamW moments within 1e-6 relative (L2 per tensor;
#     not bit-identical because the gradient sums are ordered differently: a rank sums its own
#     micro-batches, then the ranks are summed), but GPT-2's attention key bias, whose gradient
#     is rounding noise that AdamW scales up (tools/compare_checkpoints.py --key-bias-atol: at
#     most lr per step, absolute). Both schedules and the in-memory trainer, state on host and on
#     storage, N = 2 and 3, GPT-2 and Llama (no biases: every tensor within 1e-6), and bf16
#     working weights (within 1e-5: at the cases), and LoRA (Note [LoRA]: the frozen base's zero
#     gradients summed with the adapters', sharded state skipping it, dropout masks counted over
#     the micro-batches of all ranks).
#     With the state on storage, each rank's store is smaller than the single rank's by the
#     blocks' masters and moments it does not own (Note [Sharded optimizer state]).
#     Every N-rank checkpoint is sharded (Note [Sharded checkpoints]): N rank files, each an
#     N-th of the state; the comparisons read its gathered copy (`strata gather`).
#     The validation loss after the last step (every rank gathering each block's weights) is
#     the single rank's within 1e-5 relative.
#  2. Determinism: the same 2-rank run twice gives bit-identical checkpoints (every rank file).
#  3. Faults: an injected I/O error on rank 1 alone (MPMD: only rank 1 gets io.faults) stops
#     every rank, non-zero, with a line naming rank 1, the task and its store file (in its own
#     io.dirs: "{rank}" replaced); a rank
#     killed with SIGKILL makes mpirun exit non-zero within 60 s; a 2-rank run killed after a
#     checkpoint and resumed ends bit-identical to one never killed (every rank file).
#  4. A 2-rank checkpoint is resumed by 1 and by 4 ranks (resharded), and its export gathers it.
#  5. The ranks sum in device memory or through host memory with the same bits (Note
#     [Collectives on device memory]): the in-memory all-reduce, and the offloaded schedules'
#     collectives before or after the device (Note [ZeRO-3 on the device]: a block's gradient
#     reduce-scattered, its params gathered, the embed gradient all-reduced), on cpu-discrete for
#     both schedules, 2 and 3 ranks, params on storage and on host, f32 and bf16.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_SOURCE_DIR:?}" "${STRATA_BINARY_DIR:?}"
source "$STRATA_SOURCE_DIR/scripts/mpi_env.sh"  # mpi: the launch command
work="$STRATA_BINARY_DIR/test_tmp/dist_mpi"
rm -rf "$work" && mkdir -p "$work"
compare="/usr/bin/python3 $STRATA_SOURCE_DIR/tools/compare_checkpoints.py"

steps=4
lr=3e-3
key_bias_atol=$(/usr/bin/python3 -c "print($steps * $lr)")
base=(--set "optim.lr=$lr" --set model.n_layer=2 --set model.n_embd=64 --set model.context_length=64
      --set train.seq_len=64 --set train.batch_size=2 --set "train.steps=$steps" --quiet)

# run NAME RANKS M ARGS...: a run of RANKS ranks, M micro-batches each, checkpointed at the end
# into $work/NAME/ckpt.
run() {
  local name=$1 ranks=$2 m=$3
  shift 3
  mkdir -p "$work/$name"
  for ((r = 0; r < ranks; r++)); do mkdir -p "$work/$name/store$r"; done
  local launch=("$STRATA_BIN")
  [ "$ranks" -gt 1 ] && launch=("${mpi[@]}" -np "$ranks" "$STRATA_BIN")
  "${launch[@]}" train "${base[@]}" --set train.grad_accum="$m" "$@" \
    --set "io.dirs=[\"$work/$name/store{rank}\"]" \
    --save-every $steps --checkpoint-dir "$work/$name/ckpt" --metrics "$work/$name/metrics.jsonl" \
    2>"$work/$name/log" || {
    echo "run $name failed:" >&2
    cat "$work/$name/log" >&2
    exit 1
  }
}
final() { echo "$work/$1/ckpt/step-$(printf %08d $steps)"; }
# same_rank_files A B: the runs A and B (of several ranks) ended with the same checkpoint, bit for
# bit: every rank file of each.
same_rank_files() {
  local a b
  a=$(cd "$(final "$1")" && ls rank-*.state) && b=$(cd "$(final "$2")" && ls rank-*.state)
  [ -n "$a" ] && [ "$a" = "$b" ] || {
    echo "$1 and $2 wrote other rank files: [$a] and [$b]" >&2
    exit 1
  }
  for f in $a; do cmp "$(final "$1")/$f" "$(final "$2")/$f"; done
}
# expect_log NAME PATTERN WHY: run NAME logged a line matching PATTERN; else WHY, and its log.
expect_log() {
  grep -q "$2" "$work/$1/log" && return
  echo "$1: $3:" >&2
  cat "$work/$1/log" >&2
  exit 1
}
# plain DIR: the checkpoint as tools that read Hugging Face files take it: DIR itself, or, when
# ranks wrote their shards (Note [Sharded checkpoints]), the copy `strata gather` makes of it.
plain() {
  if grep -q '"shards"' "$1/manifest.json"; then
    "$STRATA_BIN" gather --checkpoint "$1" --out "$1.gathered" 2>>"$work/gather.log" || return 1
    echo "$1.gathered/$(basename "$1")"
  else
    echo "$1"
  fi
}
# shards DIR N: DIR was written by N ranks, each its own file, together 12 bytes per element of
# the layout (master, m, v), each within a few elements per extent of an N-th (shard_range).
shards() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, os, sys
d, n = sys.argv[1], int(sys.argv[2])
m = json.load(open(os.path.join(d, "manifest.json")))
files = sorted(f for f in os.listdir(d) if f.endswith(".state"))
sizes = [os.path.getsize(os.path.join(d, "rank-%05d.state" % r)) for r in range(n)]
extents = [len(f["extents"]) for f in m["shards"]["files"]]
state = sum(12 * e[2] for f in m["shards"]["files"] for e in f["extents"])
ok = (m["version"] == 3 and m["shards"]["ranks"] == n and len(files) == n and sum(sizes) == state
      and all(abs(s - state / n) <= 12 * k for s, k in zip(sizes, extents)))
print(json.dumps({"rank_file_bytes": sizes, "state_bytes": state}))
sys.exit(0 if ok else 1)
PY
}

storage=(--set offload.params_on_host=0 --set offload.optim_on_host=0
         --set offload.grads_on_host=0 --set offload.checkpoints_on_host=0 --set io.stripe_unit=4096
         --set offload.embed_optim_on_host=false)
host=(--set offload.params_on_host=1 --set offload.optim_on_host=1
      --set offload.grads_on_host=1 --set offload.checkpoints_on_host=1)
# Checksummed 8 KiB chunks: a rank's share of a kept gradient is cut at whole chunks (Note
# [Sharded kept gradient]).
checksums=(--set io.checksums=true --set io.stripe_unit=8192)
# NAME RANKS RTOL ARGS...: bf16 working weights (2 bytes per element in the all-gather) within
# 1e-5, not 1e-6, because a master that differs from the single rank's in its last bits may
# round to the neighbouring bf16 value, a 2^-8 relative change in one working weight that later
# gradients carry (measured 1.7e-6 on this case).
cases=(
  "vertical-storage-2 2 1e-6 --set train.schedule=vertical --set optim.alpha=0.5 ${storage[*]}"
  "horizontal-host-2 2 1e-6 --set train.schedule=horizontal ${host[*]}"
  "in_memory-2 2 1e-6 --set train.schedule=in_memory"
  "vertical-host-3 3 1e-6 --set train.schedule=vertical --set optim.alpha=0.5 ${host[*]}"
  "horizontal-storage-3 3 1e-6 --set train.schedule=horizontal ${storage[*]}"
  "vertical-llama-2 2 1e-6 --set model.arch=llama --set train.schedule=vertical ${storage[*]} ${checksums[*]}"
  "vertical-lora-2 2 1e-6 --set train.schedule=vertical --set optim.alpha=0.5 --set lora.rank=4 --set lora.alpha=8 --set lora.dropout=0.1 --set lora.modules_to_save=wte ${storage[*]}"
  "vertical-bf16-2 2 1e-5 --set train.schedule=vertical --set optim.alpha=0.5 --set train.precision=bf16 ${storage[*]} ${checksums[*]}"
)
# Validation after the last step (Note [Sharded working params]: with params on storage every
# rank reads its shard of each block and gathers the rest): the N-rank run's loss is the single
# rank's, up to the rounding its weights differ by.
/usr/bin/python3 - "$work/val.txt" <<'PY'
import random, sys
random.seed(7)
words = "rank shard gather store block weights step loss disk layer".split()
open(sys.argv[1], "w").write(" ".join(random.choice(words) for _ in range(3000)) + "\n")
PY
"$STRATA_BIN" prepare --in "$work/val.txt" --out "$work/val.bin" 2>/dev/null
val=(--set "data.val=\"$work/val.bin\"" --set "train.eval_every=$steps" --set train.eval_batches=2)
# val_loss NAME: the validation loss in NAME's metrics.
val_loss() {
  /usr/bin/python3 -c 'import json, sys
print(repr([json.loads(l) for l in open(sys.argv[1])][-1]["val_loss"]))' "$work/$1/metrics.jsonl"
}
results="{"
declare -A case_args case_ranks  # each case's ARGS and RANKS, for the runs compared with it below
for c in "${cases[@]}"; do
  read -r name n rtol rest <<<"$c"
  case_args[$name]=$rest
  case_ranks[$name]=$n
  read -ra args <<<"$rest"
  run "$name.one" 1 $((2 * n)) "${args[@]}" "${val[@]}"
  run "$name.dp" "$n" 2 "${args[@]}" "${val[@]}"
  v1=$(val_loss "$name.one") && vn=$(val_loss "$name.dp") || {
    echo "$name: no validation loss in the metrics" >&2
    exit 1
  }
  /usr/bin/python3 -c 'import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 1e-5 * abs(a))' \
    "$v1" "$vn" || {
    echo "$name: validation loss $vn on $n ranks, $v1 on one" >&2
    exit 1
  }
  echo "$name validation: $v1 (1 rank) $vn ($n ranks)"
  results+="\"$name-val_loss\": [$v1, $vn], "
  ckpt=$(shards "$(final "$name.dp")" "$n") || {
    echo "$name: the $n ranks did not each write an N-th of the checkpoint: $ckpt" >&2
    exit 1
  }
  echo "$name checkpoint: $ckpt"
  results+="\"$name-checkpoint\": $ckpt, "
  line=$($compare "$(final "$name.one")" "$(plain "$(final "$name.dp")")" --rtol "$rtol" \
    --key-bias-atol "$key_bias_atol") || {
    echo "$name: $n ranks x 2 micro-batches differ from 1 rank x $((2 * n)): $line" >&2
    exit 1
  }
  echo "$name: $line"
  results+="\"$name\": $line, "
  # Note [Sharded optimizer state]: with the state on storage, each rank's store holds the
  # blocks' masters and moments, 12 bytes per parameter, in 1/N: it is smaller than the single
  # rank's by (1 - 1/N) of them per block parameter (GPT-2: 12 C^2 + 13 C per block), and of the
  # working params (4 bytes, f32: Note [Sharded working params]), of the speculative copy of
  # part 0's state (vertical, alpha 0.5 with clipping on: half a block's, 6 bytes, Note
  # [Speculative steps]), and of the kept gradient (4 bytes: horizontal's, Note [Sharded
  # optimizer state], or vertical's, kept whole for the repair, Note [Sharded kept gradient]), up
  # to the 4 KiB rounding of each extent (io.stripe_unit 4096) and the I/O units a shard's
  # ranges are widened to (Note [Shard ranges in a store]).
  if [[ $name == *storage* && $name != *llama* ]]; then
    sharded=20
    [[ $name == vertical* ]] && sharded=26
    store=$(/usr/bin/python3 - "$work/$name.one/metrics.jsonl" "$work/$name.dp/metrics.jsonl" \
      "$n" "$sharded" <<'PY'
import json, sys
one, dp = (json.loads(open(p).read().splitlines()[-1])["store_bytes"] for p in sys.argv[1:3])
n, sharded, C, L = int(sys.argv[3]), int(sys.argv[4]), 64, 2
expected = sharded * (1 - 1 / n) * L * (12 * C * C + 13 * C)
saved = one - dp
ok = abs(saved - expected) <= 8 * 4096 * L
print(json.dumps({"one_rank_store_bytes": one, "per_rank_store_bytes": dp,
                  "saved_bytes": saved, "expected_saved_bytes": round(expected)}))
sys.exit(0 if ok else 1)
PY
    ) || { echo "$name: each rank's store does not hold 1/$n of the optimizer state: $store" >&2; exit 1; }
    echo "$name store: $store"
    results+="\"$name-store\": $store, "
  fi
  grep -q "ranks: MPI" "$work/$name.dp/log" || {
    echo "$name: the $n-rank run did not log its ranks" >&2
    exit 1
  }
  if [[ $name != in_memory* ]]; then  # the offloaded schedules shard, and say so
    grep -q "state sharded over $n ranks" "$work/$name.dp/log" || {
      echo "$name: the $n-rank run did not log its sharded state" >&2
      exit 1
    }
  fi
done

# Determinism: the same 2-rank run again, bit for bit.
run vertical-storage-2.again 2 2 --set train.schedule=vertical --set optim.alpha=0.5 "${storage[@]}"
same_rank_files vertical-storage-2.dp vertical-storage-2.again

# Note [Collectives on device memory]: the in-memory ranks summed their gradients in device
# memory (collectives auto; MPI point-to-point on the CPU devices), the offloaded ones each
# block's on the host, after it left the device (auto on a CPU device). The other way round, and
# on the discrete device, every rank's checkpoint file is the same, bit for bit. For the
# offloaded schedules the other way is Note [ZeRO-3 on the device]: gradients reduce-scattered,
# params gathered (from storage, from host stores; f32 and bf16) and the embed gradient
# all-reduced in device memory, with only each rank's shards crossing to and from the device.
expect_log in_memory-2.dp "gradients summed over 2 ranks: MPI point-to-point in device memory" \
  "the ranks did not sum on the device"
read -ra args <<<"${case_args[in_memory-2]}"
run in_memory-2.host 2 2 "${args[@]}" "${val[@]}" --set collectives=host
run in_memory-2.discrete 2 2 "${args[@]}" "${val[@]}" --set device=cpu-discrete \
  --set collectives=device
expect_log in_memory-2.host "gradients summed over 2 ranks: MPI .* ranks, through host memory" \
  "the ranks did not sum on the host"
same_rank_files in_memory-2.dp in_memory-2.host
same_rank_files in_memory-2.dp in_memory-2.discrete
echo "in_memory-2: the same bits summed in device memory, through host memory, on cpu-discrete"
for name in vertical-storage-2 horizontal-host-2 vertical-host-3 vertical-bf16-2; do
  expect_log "$name.dp" "block gradients reduce-scattered and params gathered by MPI .* in host memory" \
    "collectives auto did not run the collectives on the host"
  read -ra args <<<"${case_args[$name]}"
  n=${case_ranks[$name]}
  run "$name.discrete" "$n" 2 "${args[@]}" "${val[@]}" --set device=cpu-discrete \
    --set collectives=device
  expect_log "$name.discrete" \
    "params gathered by MPI point-to-point in device memory: each rank moves 1/$n of a block" \
    "the ranks did not run the collectives on the device"
  same_rank_files "$name.dp" "$name.discrete"
  if [ "$name" = vertical-storage-2 ]; then  # and on the CPU device, in its one memory
    run "$name.device" "$n" 2 "${args[@]}" "${val[@]}" --set collectives=device
    same_rank_files "$name.dp" "$name.device"
  fi
  echo "$name: the same bits with the collectives in host memory and in device memory"
done

# An I/O error on rank 1 alone stops both ranks, naming rank 1, the task and the file.
mkdir -p "$work/fault/store0" "$work/fault/store1"
fargs=(train "${base[@]}" --set train.steps=50 --set train.grad_accum=2
       --set train.schedule=vertical "${storage[@]}"
       --set "io.dirs=[\"$work/fault/store{rank}\"]")
set +e
timeout 120 "${mpi[@]}" -np 1 "$STRATA_BIN" "${fargs[@]}" : \
  -np 1 "$STRATA_BIN" "${fargs[@]}" --set io.faults=write:40:eio 2>"$work/fault/log"
code=$?
set -e
if [ "$code" -eq 0 ] || [ "$code" -eq 124 ]; then
  echo "an I/O error on rank 1 did not stop the run (exit $code):" >&2
  cat "$work/fault/log" >&2
  exit 1
fi
grep -E "strata\[rank 1\]: error: training stopped: io_error: .*task '[^']+' .*$work/fault/store1/" \
  "$work/fault/log" >/dev/null || {
  echo "no line names rank 1, the task and its store file:" >&2
  cat "$work/fault/log" >&2
  exit 1
}
echo "fault on rank 1: exit $code, $(grep -c . "$work/fault/log") lines"

# Launchers started in the background, ended (with their ranks) however this script exits: a
# rank left running would hold CTest's output pipe open and hang the suite.
launchers=()
end_launchers() {
  local p
  for p in "${launchers[@]}"; do
    pkill -9 -P "$p" 2>/dev/null
    kill -9 "$p" 2>/dev/null
  done
  return 0
}
trap end_launchers EXIT
# reap PID: waits for background launcher PID (which must have ended or be ending), its exit
# status into $code; it then needs no ending. (Not in $(...): a subshell cannot wait for it.)
reap() {
  code=0
  wait "$1" || code=$?
  launchers=()
}

# The pid of rank R ($2) among mpirun $1's children (the one whose environment says
# OMPI_COMM_WORLD_RANK=R), looked for up to 10 s. The environment is read whole before it is
# searched: `tr | grep -q` would fail under pipefail whenever grep stops reading first.
rank_pid() {
  local p i env
  for ((i = 0; i < 100; i++)); do
    for p in $(pgrep -P "$1"); do
      env=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null) || continue
      if grep -qx "OMPI_COMM_WORLD_RANK=$2" <<<"$env"; then
        echo "$p"
        return
      fi
    done
    sleep 0.1
  done
}
# wait_for FILE SECONDS: until FILE exists.
wait_for() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    [ -e "$1" ] && return 0
    sleep 0.1
  done
  echo "timed out waiting for $1" >&2
  return 1
}

# A killed rank: mpirun (and so every rank) ends non-zero within 60 s.
mkdir -p "$work/kill/store0" "$work/kill/store1"
"${mpi[@]}" -np 2 "$STRATA_BIN" train "${base[@]}" --set train.steps=100000 \
  --set train.grad_accum=2 --set train.schedule=vertical \
  --set "io.dirs=[\"$work/kill/store{rank}\"]" --metrics "$work/kill/metrics.jsonl" \
  2>"$work/kill/log" &
launcher=$!
launchers+=("$launcher")
wait_for "$work/kill/metrics.jsonl" 60
sleep 0.5
victim=$(rank_pid "$launcher" 1)
[ -n "$victim" ] || { echo "rank 1 of mpirun $launcher not found" >&2; exit 1; }
kill -9 "$victim"
start=$SECONDS
for ((i = 0; i < 600; i++)); do
  kill -0 "$launcher" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$launcher" 2>/dev/null; then
  echo "mpirun still runs 60 s after rank 1 was killed" >&2
  kill -9 "$launcher"
  exit 1
fi
reap "$launcher"
[ "$code" -ne 0 ] || { echo "mpirun exited 0 after rank 1 was killed" >&2; exit 1; }
echo "killed rank 1: mpirun exited $code after $((SECONDS - start)) s"

# kill -9 after a checkpoint, resume, end bit-identical to a run never killed.
rargs=(train "${base[@]}" --set train.steps=8 --set train.grad_accum=2 --set train.schedule=vertical
       --set optim.alpha=0.5 "${storage[@]}" --save-every 2)
mkdir -p "$work/resume/ref0" "$work/resume/ref1" "$work/resume/s0" "$work/resume/s1"
"${mpi[@]}" -np 2 "$STRATA_BIN" "${rargs[@]}" --set "io.dirs=[\"$work/resume/ref{rank}\"]" \
  --checkpoint-dir "$work/resume/ref" 2>"$work/resume/ref.log"
"${mpi[@]}" -np 2 "$STRATA_BIN" "${rargs[@]}" --set "io.dirs=[\"$work/resume/s{rank}\"]" \
  --set io.write_bytes_per_s=2000000 --checkpoint-dir "$work/resume/ckpt" \
  2>"$work/resume/run1.log" &
launcher=$!
launchers+=("$launcher")
wait_for "$work/resume/ckpt/step-00000002" 120
victim=$(rank_pid "$launcher" 0)
[ -n "$victim" ] || { echo "rank 0 of mpirun $launcher not found" >&2; exit 1; }
kill -9 "$victim"
reap "$launcher"
[ "$code" -ne 0 ] || { echo "the killed run exited 0" >&2; exit 1; }
[ ! -d "$work/resume/ckpt/step-00000008" ] || { echo "the kill came too late" >&2; exit 1; }
"${mpi[@]}" -np 2 "$STRATA_BIN" "${rargs[@]}" --set "io.dirs=[\"$work/resume/s{rank}\"]" \
  --checkpoint-dir "$work/resume/ckpt" --resume "$work/resume/ckpt" 2>"$work/resume/run2.log"
grep -q "resumed from $work/resume/ckpt/step-" "$work/resume/run2.log"
for r in 0 1; do
  cmp "$work/resume/ref/step-00000008/rank-0000$r.state" "$work/resume/ckpt/step-00000008/rank-0000$r.state"
done
$compare "$(plain "$work/resume/ref/step-00000008")" "$(plain "$work/resume/ckpt/step-00000008")" \
  --rtol 0
echo "kill -9 + resume of 2 ranks: bit-identical"

# The export of a sharded checkpoint gathers it: the same file as the export of its gathered copy.
"$STRATA_BIN" export --checkpoint "$work/resume/ref/step-00000008" \
  --out "$work/export/sharded/model.safetensors" 2>"$work/export.log"
"$STRATA_BIN" export --checkpoint "$(plain "$work/resume/ref/step-00000008")" \
  --out "$work/export/gathered/model.safetensors" 2>>"$work/export.log"
cmp "$work/export/sharded/model.safetensors" "$work/export/gathered/model.safetensors"
[ -z "$(ls -A "$work/export/sharded" | grep -v -e '^model.safetensors$' -e '^config.json$')" ] || {
  echo "the export of a sharded checkpoint left files: $(ls -A "$work/export/sharded")" >&2
  exit 1
}
echo "export of a sharded checkpoint: the gathered export, byte for byte"

# Another world size resumes the (sharded) state: the 2-rank checkpoint at step 4 taken on by
# 1 rank x 4 micro-batches and by 4 ranks x 1, the same 4 per step; each ends within 1e-6 of the
# 2-rank run (the sums' order differs, as above; the key bias bound covers 8 steps).
for n in 1 4; do
  m=$((4 / n))
  name=resume-as-$n
  mkdir -p "$work/$name/ckpt"
  cp -r "$work/resume/ref/step-00000004" "$work/$name/ckpt/"
  for ((r = 0; r < n; r++)); do mkdir -p "$work/$name/s$r"; done
  launch=("$STRATA_BIN")
  [ "$n" -gt 1 ] && launch=("${mpi[@]}" -np "$n" "$STRATA_BIN")
  "${launch[@]}" "${rargs[@]}" --set train.grad_accum=$m \
    --set "io.dirs=[\"$work/$name/s{rank}\"]" --checkpoint-dir "$work/$name/ckpt" \
    --resume "$work/$name/ckpt/step-00000004" 2>"$work/$name/log" || {
    cat "$work/$name/log" >&2
    exit 1
  }
  grep -q "resumed from .*step-00000004 at step 4" "$work/$name/log"
  line=$($compare "$(plain "$work/resume/ref/step-00000008")" \
    "$(plain "$work/$name/ckpt/step-00000008")" --rtol 1e-6 \
    --key-bias-atol "$(/usr/bin/python3 -c "print(8 * $lr)")")
  echo "2-rank checkpoint resumed by $n ranks x $m: $line"
  results+="\"resumed-by-$n\": $line, "
done
echo "${results%, }}"
