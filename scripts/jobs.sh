# Sourced by the scripts in scripts/: how many build and test jobs to run at once.
# GNU nproc honours OMP_NUM_THREADS and OMP_THREAD_LIMIT, which a run may set for its own
# reasons (the TSan phase sets OMP_NUM_THREADS=1): counted with them, the TSan phase built and
# ran one job at a time. So the processors are counted with both unset.
jobs=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
