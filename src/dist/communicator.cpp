// The world of one, the shard arithmetic and the launcher check (Note [Data parallel ranks]).
#include "dist/communicator.h"

#include <algorithm>
#include <cstdlib>

namespace strata {

namespace {

class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  Status all_reduce_sum(float*, int64_t) override { return Status::ok_status(); }
  Status all_reduce_sum(double*, int64_t) override { return Status::ok_status(); }
  Status reduce_scatter_sum(float*, int64_t) override { return Status::ok_status(); }
  Status all_gather(void*, int64_t, int64_t) override { return Status::ok_status(); }
  Status broadcast(void*, int64_t, int) override { return Status::ok_status(); }
  Result<int64_t> all_reduce_max(int64_t value) override { return value; }
  void abort_all(int) override {}
  std::string describe() const override { return "one process"; }
};

template <typename T>
void sum_rows(T* out, const T* parts, int ranks, int64_t stride, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    T s = parts[i];
    for (int r = 1; r < ranks; ++r) s += parts[static_cast<int64_t>(r) * stride + i];
    out[i] = s;
  }
}

}  // namespace

std::unique_ptr<Communicator> make_single_process_communicator() {
  return std::make_unique<SingleProcess>();
}

Communicator& single_process_world() {
  static SingleProcess world;
  return world;
}

bool launched_by_mpi() {
  // OpenMPI's mpirun sets OMPI_COMM_WORLD_SIZE; PMI-based launchers (MPICH's, Slurm's) PMI_SIZE.
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr;
}

Result<std::unique_ptr<Communicator>> open_world() {
  if (!launched_by_mpi()) return make_single_process_communicator();
  return make_mpi_communicator();
}

int64_t collective_rounds(int64_t count, int64_t round_elems) {
  return std::max<int64_t>(1, (count + round_elems - 1) / round_elems);
}

std::vector<Range> round_pieces(int64_t count, int ranks, int64_t rounds, int64_t k) {
  std::vector<Range> pieces;
  pieces.reserve(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    const Range shard = shard_range(count, ranks, r);
    const Range piece =
        shard_range(shard.end - shard.begin, static_cast<int>(rounds), static_cast<int>(k));
    pieces.push_back({shard.begin + piece.begin, shard.begin + piece.end});
  }
  return pieces;
}

void sum_in_rank_order(float* out, const float* parts, int ranks, int64_t stride, int64_t n) {
  sum_rows(out, parts, ranks, stride, n);
}
void sum_in_rank_order(double* out, const double* parts, int ranks, int64_t stride, int64_t n) {
  sum_rows(out, parts, ranks, stride, n);
}

std::string substitute_rank(const std::string& path, int rank) {
  static const std::string kKey = "{rank}";
  std::string out;
  size_t at = 0;
  for (size_t hit; (hit = path.find(kKey, at)) != std::string::npos; at = hit + kKey.size()) {
    out.append(path, at, hit - at);
    out += std::to_string(rank);
  }
  out.append(path, at, std::string::npos);
  return out;
}

}  // namespace strata
