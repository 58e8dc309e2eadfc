// make_mpi_communicator for builds without MPI (CMake found none); with MPI,
// dist/mpi_communicator.cpp defines the real one.
#include "dist/communicator.h"
#include "dist/peer_transport.h"

namespace strata {

Result<std::unique_ptr<Communicator>> make_mpi_communicator() {
  return unavailable(
      "launched by mpirun, but this strata was built without MPI (install libopenmpi-dev: "
      "scripts/setup.sh, then rebuild)");
}

Result<std::unique_ptr<PeerTransport>> make_mpi_peer_transport(Communicator&) {
  return unavailable("this strata was built without MPI");
}

}  // namespace strata
