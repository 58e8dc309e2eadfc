# Sourced by the scripts that start ranks on this machine (tests/dist_*.sh, bench/data_parallel.sh,
# bench/collectives.sh): OpenMPI's mpirun, checked for, with what it needs here, and `mpi`, the
# launch command (add -np N and the program).
# CI runs as root in a container: OpenMPI refuses root without the first two, and the ranks share
# the machine's cores (one OpenMP thread each, oversubscribed when there are more ranks than
# cores). vader's single-copy path needs ptrace rights a container may not grant; plain
# shared-memory copies always work.
command -v mpirun >/dev/null || { echo "mpirun not found: run scripts/setup.sh" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
mpi=(mpirun --bind-to none -x OMP_NUM_THREADS=1)
