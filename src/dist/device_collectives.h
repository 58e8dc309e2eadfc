// Sums over the ranks of buffers in device memory (docs/design.md §12).
//
// Note [Collectives on device memory]
// A gradient on a GPU is summed over the ranks either through host memory (copied out, summed by
// MPI there; for the in-memory trainer copied back in) or where it is: NCCL moves it between the
// GPUs and the device adds, and the host's cores stay free for the CPU optimizer. Either way the
// sum is Note [Deterministic all-reduce]'s, piece for piece: in each round of round_pieces every
// rank sends piece r of its buffer to rank r, which adds the N pieces in rank order with the
// device's `add` (one f32 addition per element, as sum_in_rank_order) and, for an all-reduce,
// sends the sum to every rank. So the bits are the host path's. A transport (PeerTransport) gives
// only grouped point-to-point moves: NCCL's on a GPU, MPI's on the CPU devices, where CI tests
// this code (tests/dist_collectives.sh, tests/dist_mpi.sh). Users: the in-memory trainer, once per
// step; the offloaded plans' net tasks on device slots (Note [ZeRO-3 on the device] in
// sched/schedule_spec.h; docs/design.md §12 says why).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "dist/communicator.h"
#include "dist/peer_transport.h"

namespace strata {

class DeviceCollectives {
 public:
  // `world` names the ranks (and must outlive this); `transport` moves between them.
  // round_elems: elements of the buffer each round moves (kAllReduceChunkElems; smaller in tests).
  DeviceCollectives(Device& dev, Communicator& world, std::unique_ptr<PeerTransport> transport,
                    int64_t round_elems = kAllReduceChunkElems);

  // data[0, count), device memory, summed over the ranks in place, ordered after the work on `s`
  // so far and before the work enqueued after it; the same bits on every rank, and as
  // Communicator::all_reduce_sum's. Every rank calls it with the same count, in the same order.
  Status all_reduce_sum(Stream& s, float* data, int64_t count);
  // The first half of all_reduce_sum (as Communicator::reduce_scatter_sum): on return this rank's
  // shard_range(count) of data holds the sums, in rank order; the rest of data is unspecified.
  Status reduce_scatter_sum(Stream& s, float* data, int64_t count);
  // The second half (as Communicator::all_gather): rank r's shard_range(count) of data (elements
  // of elem_bytes bytes, device memory) copied to every rank; no scratch, nothing summed.
  Status all_gather(Stream& s, void* data, int64_t count, int64_t elem_bytes);
  // Allocates now the device scratch a sum of `count` needs (ranks x its largest piece), so
  // that a device budget too small for it is found before training, not at the first sum.
  Status reserve(int64_t count);

  // "NCCL 2.28.9 (GPU 0) in device memory".
  std::string describe() const;

 private:
  Status reduce_scatter_round(Stream& s, float* data, const std::vector<Range>& pieces);
  Status all_gather_round(Stream& s, char* data, int64_t elem_bytes,
                          const std::vector<Range>& pieces);
  // parts_ at least (ranks, piece_len), grown only; s: where the old scratch may still be read.
  Status grow_parts(Stream* s, int64_t piece_len);

  Device& dev_;
  Communicator& world_;
  std::unique_ptr<PeerTransport> transport_;
  int64_t round_elems_;
  Buffer parts_;  // (ranks, piece) f32 device memory: every rank's values of this rank's piece
};

}  // namespace strata
