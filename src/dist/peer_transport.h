// Point-to-point moves between the ranks' device memories: what a transport gives the
// collectives on device memory (Note [Collectives on device memory] in dist/device_collectives.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace strata {

class Communicator;
class Device;
class Stream;

// Moves are posted in groups: within one, every send and receive is posted before any is waited
// on, so the ranks may post them in any order without deadlock. Every rank posts the same groups
// in the same order; a send of n bytes to rank p meets p's receive of n bytes from this rank in
// the same group. A move may go to this rank itself.
class PeerTransport {
 public:
  virtual ~PeerTransport() = default;
  // Opens a group whose moves come after the work enqueued on `s` so far.
  virtual Status start_group(Stream& s) = 0;
  virtual Status send(const void* data, int64_t bytes, int peer) = 0;
  virtual Status recv(void* data, int64_t bytes, int peer) = 0;
  // Closes the group: work enqueued on the group's stream after this call sees every move done.
  virtual Status end_group() = 0;
  // "NCCL 2.27.7", "MPI point-to-point".
  virtual std::string describe() const = 0;
};

// MPI's sends and receives over memory the host can address (the CPU devices'), on a duplicate of
// world's communicator; a group waits for its stream first and for its moves when it closes.
// unavailable when built without MPI, or when world is not MPI's.
Result<std::unique_ptr<PeerTransport>> make_mpi_peer_transport(Communicator& world);

// NCCL's ncclSend/ncclRecv on the CUDA device `dev` (a communicator of world's ranks, its id sent
// from rank 0 over world); the moves run on the group's stream. unavailable when built without
// NCCL or when dev is not a CUDA device. Every rank calls it at the same point.
Result<std::unique_ptr<PeerTransport>> make_nccl_peer_transport(Device& dev, Communicator& world);

}  // namespace strata
