// make_mpi_communicator for builds without MPI (CMake found none); with MPI,
// dist/mpi_communicator.cpp defines the real one.
#include "dist/communicator.h"

namespace strata {

Result<std::unique_ptr<Communicator>> make_mpi_communicator() {
  return unavailable(
      "launched by mpirun, but this strata was built without MPI (install libopenmpi-dev: "
      "scripts/setup.sh, then rebuild)");
}

}  // namespace strata
