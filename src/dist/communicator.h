// Ranks of a data-parallel run and the collectives they share (docs/design.md §12).
//
// Note [Data parallel ranks]
// `mpirun -np N strata train ...` starts N ranks; a plain `strata train` is a world of one. Each
// rank has its own store (its own io.dirs) and trains its own micro-batches: of the N x M a step
// takes from the data stream, rank r takes r*M .. r*M+M-1, so the stream, and the data position a
// checkpoint records, do not depend on N. Losses are scaled by 1/(N*M*B*T), so the gradients
// summed over the ranks are the global mean at once (one rounding fewer than averaging after).
// A gradient complete on a rank is summed over the ranks by a task on the `net` queue, overlapping
// like any transfer: a block's is reduce-scattered to its shards' owners (Note [Sharded optimizer
// state]); the embed group's and the in-memory trainer's are all-reduced. Every rank then computes
// the same norm, clip factor and skip, and takes the same step on what it holds. Rank 0 logs,
// writes metrics and traces; every rank writes its checkpoint shard (Note [Sharded checkpoints]).

// Note [Deterministic all-reduce]
// all_reduce_sum gives every rank the same bits, whatever the timing and whatever the transport:
// element i is summed by one rank only, in rank order ((x0 + x1) + x2 ...), and that sum is
// copied to the others. The buffer is cut into N contiguous shards (shard_range); rank r gathers
// shard r from every rank (MPI_Alltoallv), sums it in rank order (sum_in_rank_order), and the
// sums are gathered back to everyone (MPI_Allgatherv): a reduce-scatter and an all-gather, each
// rank sending (N-1)/N of the buffer twice. MPI_Allreduce promises none of this (its reduction
// order may depend on the algorithm the library picks for the size), so it is not used for
// gradients. Large buffers go through in rounds (kAllReduceChunkElems of the buffer each: round k
// moves piece k of every shard) so scratch stays bounded.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/math_util.h"
#include "core/status.h"

namespace strata {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // This rank among the ranks on its machine (those sharing its memory), and how many there are:
  // a rank's GPU is its local rank's (create_configured_device in train/trainer.h).
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  // data[0, count) summed over the ranks in place, the same bits on every rank (Note
  // [Deterministic all-reduce]). Every rank calls it with the same count, in the same order.
  virtual Status all_reduce_sum(float* data, int64_t count) = 0;
  virtual Status all_reduce_sum(double* data, int64_t count) = 0;
  // The first half of all_reduce_sum (Note [Sharded optimizer state]): on return this rank's
  // shard_range(count) of data holds the sums, in rank order; the rest of data is this rank's own
  // values, or partial sums: unspecified.
  virtual Status reduce_scatter_sum(float* data, int64_t count) = 0;
  // The second half: rank r's shard_range(count) of data (elements of elem_bytes bytes) copied to
  // every rank.
  virtual Status all_gather(void* data, int64_t count, int64_t elem_bytes) = 0;
  // `bytes` of root's data copied to every rank's data.
  virtual Status broadcast(void* data, int64_t bytes, int root) = 0;
  // The largest of every rank's `value` (exact, so the same on every rank).
  virtual Result<int64_t> all_reduce_max(int64_t value) = 0;
  // Ends every rank of the run with `code` (after this rank reported why); returns only in a
  // world of one.
  virtual void abort_all(int code) = 0;
  // "MPI (OpenMPI v4.1.4), 2 ranks", "one process".
  virtual std::string describe() const = 0;
};

// The world of one: collectives are the identity.
std::unique_ptr<Communicator> make_single_process_communicator();
// One shared world of one, for trainers of single-process runs.
Communicator& single_process_world();

// Whether this process was started by an MPI launcher (mpirun sets its rank in the environment).
bool launched_by_mpi();
// MPI's world (MPI_Init_thread; MPI_Finalize when it goes). unavailable when built without MPI.
// One per process.
Result<std::unique_ptr<Communicator>> make_mpi_communicator();
// The run's world: MPI's when launched by mpirun, else the world of one.
Result<std::unique_ptr<Communicator>> open_world();

// ---- the arithmetic shared by every transport (tested without one) -----------------------------
// Elements a collective moves per round (Note [Deterministic all-reduce]): 4 Mi, 16 MiB of f32.
inline constexpr int64_t kAllReduceChunkElems = int64_t{1} << 22;
// How many rounds a collective over `count` elements takes, `round_elems` of the buffer each (at
// least one, even for no elements).
int64_t collective_rounds(int64_t count, int64_t round_elems = kAllReduceChunkElems);
// Round k of `rounds`: piece k of every rank's shard of `count` elements (shard_range of the
// shard), piece[r] being rank r's, in buffer coordinates. Every transport cuts rounds this way.
std::vector<Range> round_pieces(int64_t count, int ranks, int64_t rounds, int64_t k);
// out[i] = ((parts[0][i] + parts[1][i]) + ...) for i < n: `parts` holds `ranks` rows of
// `stride` elements, row r being rank r's contribution.
void sum_in_rank_order(float* out, const float* parts, int ranks, int64_t stride, int64_t n);
void sum_in_rank_order(double* out, const double* parts, int ranks, int64_t stride, int64_t n);

// "{rank}" in `path` replaced by `rank` (every occurrence).
std::string substitute_rank(const std::string& path, int rank);

}  // namespace strata
