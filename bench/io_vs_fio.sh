#!/usr/bin/env bash
# Strata's storage engine against fio on the same file, in the same run.
#   cells: sequential read and write, 1 MiB blocks, queue depth 8 and 32, O_DIRECT;
#          fio with io_uring (the bar: Strata >= 0.95x) and fio with libaio at DeepSpeed's
#          defaults (1 MiB blocks, depth 8; the engine DeepSpeed's aio uses).
# Rounds alternate the order of the tools; figures are medians over rounds.
# Last line: JSON with min_ratio_vs_fio and ratio_vs_libaio_defaults.
#   usage: bench/io_vs_fio.sh [DIR] [SIZE_MIB=2048] [ROUNDS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${STRATA_BUILD_DIR:-build}
dir=${1:-$build_dir/bench-io}
size_mib=${2:-2048}
rounds=${3:-3}
mkdir -p "$dir"
if ! command -v fio >/dev/null; then
  echo "io_vs_fio: installing fio" >&2
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get install -y -qq fio >/dev/null
fi
cmake --build "$build_dir" --target strata >/dev/null
file="$dir/io-vs-fio.dat"
out=$(mktemp -d)
trap 'rm -rf "$out" "$file"' EXIT

# Fill the file once so reads hit written blocks.
fio --name=fill --filename="$file" --rw=write --bs=1M --size="${size_mib}M" --direct=1 \
  --ioengine=io_uring --iodepth=32 --output=/dev/null

run_fio() {  # engine op qd -> GB/s
  # Strata fdatasyncs at the end of a write pass; fio must too (--end_fsync) to be comparable.
  fio --name=cell --filename="$file" --rw="$2" --bs=1M --size="${size_mib}M" --direct=1 --end_fsync=1 \
    --ioengine="$1" --iodepth="$3" --output-format=json --output="$out/fio.json"
  /usr/bin/python3 -c "import json,sys; j=json.load(open('$out/fio.json'))['jobs'][0]; \
print(j['$2']['bw_bytes']/1e9)"
}
run_strata() {  # op qd -> GB/s
  "$build_dir/strata" bench-io --file "$file" --size "${size_mib}M" --block 1M --qd "$2" \
    --op "$1" --engine uring | tail -n 1 |
    /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['gb_per_s'])"
}

for ((r = 0; r < rounds; r++)); do
  echo "round $((r + 1))/$rounds" >&2
  for op in write read; do
    for qd in 8 32; do
      if ((r % 2 == 0)); then
        s=$(run_strata $op $qd); f=$(run_fio io_uring $op $qd)
      else
        f=$(run_fio io_uring $op $qd); s=$(run_strata $op $qd)
      fi
      echo "$op $qd strata $s" >>"$out/results.txt"
      echo "$op $qd fio_uring $f" >>"$out/results.txt"
    done
    echo "$op 8 fio_libaio $(run_fio libaio $op 8)" >>"$out/results.txt"
  done
done

/usr/bin/python3 - "$out/results.txt" "$size_mib" "$rounds" <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    op, qd, tool, gbps = line.split()
    runs[(op, int(qd), tool)].append(float(gbps))
med = {k: statistics.median(v) for k, v in runs.items()}
cells = []
print(f"sequential, 1 MiB blocks, O_DIRECT, {sys.argv[2]} MiB file, median of {sys.argv[3]} rounds (GB/s)")
print(f"{'op':>5} {'qd':>3} {'strata':>8} {'fio io_uring':>13} {'ratio':>6}")
for op in ("read", "write"):
    for qd in (8, 32):
        s, f = med[(op, qd, "strata")], med[(op, qd, "fio_uring")]
        cells.append({"op": op, "qd": qd, "strata_gbps": round(s, 3), "fio_gbps": round(f, 3),
                      "ratio": round(s / f, 3)})
        print(f"{op:>5} {qd:>3} {s:8.3f} {f:13.3f} {s / f:6.3f}")
libaio = []
for op in ("read", "write"):
    s, l = med[(op, 8, "strata")], med[(op, 8, "fio_libaio")]
    libaio.append({"op": op, "strata_gbps": round(s, 3), "libaio_gbps": round(l, 3),
                   "ratio": round(s / l, 3)})
    print(f"{op:>5} vs fio libaio at DeepSpeed defaults (1 MiB, qd 8): strata {s:.3f} libaio {l:.3f} ratio {s / l:.3f}")
print(json.dumps({"cells": cells, "libaio_defaults": libaio,
                  "min_ratio_vs_fio": min(c["ratio"] for c in cells),
                  "ratio_vs_libaio_defaults": min(c["ratio"] for c in libaio)}))
PY
