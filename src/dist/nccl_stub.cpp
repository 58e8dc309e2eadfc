// make_nccl_peer_transport for builds without NCCL (no CUDA, or no NCCL beside the toolkit);
// dist/nccl_transport.cpp is the real one.
#include "backend/backend.h"
#include "dist/peer_transport.h"

namespace strata {

Result<std::unique_ptr<PeerTransport>> make_nccl_peer_transport(Device&, Communicator&) {
  return unavailable("this strata was built without NCCL");
}

}  // namespace strata
