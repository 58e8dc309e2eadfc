#!/usr/bin/env bash
# Honest predictions (docs/design.md §7, docs/planner.md): runs configurations of the offloaded
# schedules on this machine and compares each measured iteration time with the simulator's
# prediction from a profile that `strata profile` measures in parts between the rows (one round
# of instrumented runs, robust to disturbed tasks, before every third row: Note [Robust timings]
# in src/planner/profile_measure.h), merged by the median so that it describes the machine over the
# same minutes as the rows (this VM's speed drifts by 10-25% over minutes).
#   model: bench-14m (GPT, 8 blocks x C=384, 6 heads, vocab 256, T=256; 14.4M parameters, f32),
#          micro-batch B=1 x T=256, as bench/schedules.sh.
#   rows: both schedules; M from 1 to 16; params/optimizer state/checkpoints/gradients on host or
#         storage (and split); storage rate limits 100-400 MB/s; vertical alpha 0.35-1, clipping
#         on at alpha 1, and clipping on at alpha 0.5 with speculative steps (a threshold that
#         never clips).
# Per row the measured figure is the median iter_s over the steps after step 0 (step 0 is warm-up
# and, for vertical, the only iteration without pending optimizer steps); the fastest step is
# printed beside it (other work on a shared machine only ever lengthens a step, so a gap between
# the two flags a disturbed run); the simulated one comes from `strata plan --simulate` on the
# same config (vertical: its steady iteration).
# The "other" column is the CPU time other processes took (or the hypervisor stole) while the row
# ran; "compute" is compute's measured busy time over the simulated one (far from 1: the machine
# computed at another speed than the profile's, or the compute model is off for the row; a rerun
# tells which). The profile's own figures are printed above the table.
# Passes when every row is within 15% and the median error is at most 5%. The last line of the
# output is one JSON object: max_rel_error, median_rel_error, configs, goal_met,
# profile_measurement, busy_rows, rows.
# Env: STRATA_BIN (default: build, then build/strata), OUT_DIR (build/planner_accuracy),
#      STRATA_BENCH_STORE (store directory; default under OUT_DIR), STRATA_BENCH_STEPS (4 per round).
#   usage: bench/planner_accuracy.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
out=${OUT_DIR:-$build_dir/planner_accuracy}
mkdir -p "$out" "${STRATA_BENCH_STORE:-$out}"
store=$(mktemp -d "${STRATA_BENCH_STORE:-$out}/store.XXXXXX")
trap 'rm -rf "$store"' EXIT
exec /usr/bin/python3 bench/planner_accuracy_report.py --bin "$STRATA_BIN" --out "$out" \
  --store "$store" --steps "${STRATA_BENCH_STEPS:-4}"
