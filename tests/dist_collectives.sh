#!/usr/bin/env bash
# CTest `dist_collectives`: the collectives on device memory (Note [Collectives on device memory]
# in src/dist/device_collectives.h) over MPI point-to-point, on 1, 2 and 3 ranks: every rank's
# device sum (and its reduce-scatter, over the rank's shard) equals the host all-reduce and the
# rank-order sum bit for bit, and its all-gather of 4- and 2-byte elements the host's, on the CPU
# device and the discrete one, with rounds of every size (tests/dist/collectives_check.cpp).
set -euo pipefail
: "${STRATA_BINARY_DIR:?}" "${STRATA_SOURCE_DIR:?}"
source "$STRATA_SOURCE_DIR/scripts/mpi_env.sh"  # mpi: the launch command
check="$STRATA_BINARY_DIR/tests/collectives_check"
[ -x "$check" ] || { echo "$check not built (MPI missing at configure time?)" >&2; exit 1; }
for n in 1 2 3; do
  timeout 120 "${mpi[@]}" -np "$n" "$check"
done
