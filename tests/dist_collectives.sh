#!/usr/bin/env bash
# CTest `dist_collectives`: the collectives on device memory (Note [Collectives on device memory]
# in src/dist/device_collectives.h) over MPI point-to-point, on 1, 2 and 3 ranks: every rank's
# device sum (and its reduce-scatter, over the rank's shard) equals the host all-reduce and the
# rank-order sum bit for bit, on the CPU device and the discrete one, with rounds of every size
# (tests/dist/collectives_check.cpp).
set -euo pipefail
: "${STRATA_BINARY_DIR:?}"
command -v mpirun >/dev/null || { echo "mpirun not found: run scripts/setup.sh" >&2; exit 1; }
check="$STRATA_BINARY_DIR/tests/collectives_check"
[ -x "$check" ] || { echo "$check not built (MPI missing at configure time?)" >&2; exit 1; }
# As in dist_mpi.sh: root in a container, ranks sharing the cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
for n in 1 2 3; do
  timeout 120 mpirun --bind-to none -x OMP_NUM_THREADS=1 -np "$n" "$check"
done
