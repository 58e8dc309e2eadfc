#!/usr/bin/env bash
# `strata report` on a long run's metrics: peak memory, page size and time for STEPS steps
# (Note [Downsampling a series] in src/report/downsample.h: the reader streams the file and each
# series keeps at most 2000 points, so neither should grow with the run).
#   The metrics file is generated, shaped like an offloaded vertical run's (every field a real line
#   has: bytes per direction, busy seconds per queue, the roofline, peaks and plans), with a
#   validation loss every 250 steps, a checkpoint every 1000, one loss spike and one skipped step.
#   The report runs under /usr/bin/time -v; its peak RSS includes the binary's own start-up (the
#   CUDA libraries it links, when built with them).
# Last line: JSON {steps, metrics_bytes, peak_rss_bytes, page_bytes, seconds}.
#   usage: bench/report_scale.sh [STEPS=2000000] [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
steps=${1:-2000000}
dir=$(realpath -m "${2:-$build_dir/bench-report}")
# About 850 bytes a line, and a margin.
bench_scratch report_scale "$dir" $((steps * 9 / 10 + 64 * 1024))

/usr/bin/python3 - "$steps" "$dir/run.jsonl" <<'PY'
import math, sys
steps, path = int(sys.argv[1]), sys.argv[2]
line = ('{"acts_forwarded_sets":0,"acts_storage_read_bytes":0,"acts_storage_write_bytes":0,'
        '"busy_s":{"compute":%.9f,"cpu_optim":%.9f,"d2h":%.9f,"h2d":%.9f,"storage_read":%.9f,'
        '"storage_write":%.9f},"d2h_bytes":630784,"grad_norm":%.15g,"h2d_bytes":772096,'
        '"iter_s":%.9f,"loss":%.15g,"lr":%.15g,"model_flops_per_s":%.15g,"over_roofline":%.15g,'
        '"peak_device_bytes":5009408,"peak_host_bytes":3465216,"planned_device_bytes":5006336,'
        '"planned_host_bytes":3451944,"roofline_s":%.9f,"skipped":%s,"step":%d,'
        '"storage_read_bytes":1843200,"storage_write_bytes":2048000,"store_bytes":6291456,'
        '"tokens_per_s":%.15g%s}\n')
with open(path, "w", buffering=1 << 20) as f:
    for i in range(steps):
        wobble = math.sin(i * 0.001) * 0.01
        loss = 9.5 if i == steps // 3 else 5.5 / (1 + i * 1e-5) + wobble
        extra = ',"val_loss":%.15g' % (loss + 0.1) if i % 250 == 249 else ""
        if i % 1000 == 999:
            extra += ',"checkpoints":[{"behind":true,"stall_s":0.012,"step":%d,"write_s":0.21}]' % i
        iter_s = 0.06 + wobble
        f.write(line % (0.042 + wobble, 0.0027, 0.00068, 0.0097, 0.0078, 0.0078, 3.7 + wobble,
                        iter_s, loss, 3e-4, 3.3e9, 1.36, 0.0446, "true" if i == steps // 2
                        else "false", i, 256 / iter_s, extra))
PY

metrics_bytes=$(stat -c %s "$dir/run.jsonl")
start=$EPOCHREALTIME
/usr/bin/time -v "$STRATA_BIN" report "$dir/run.jsonl" --out "$dir/report.html" \
  2>"$dir/time.log" || { cat "$dir/time.log" >&2; exit 1; }
seconds=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
peak_kb=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$dir/time.log")
page_bytes=$(stat -c %s "$dir/report.html")
printf '{"steps": %d, "metrics_bytes": %d, "peak_rss_bytes": %d, "page_bytes": %d, "seconds": %s}\n' \
  "$steps" "$metrics_bytes" $((peak_kb * 1024)) "$page_bytes" "$seconds"
