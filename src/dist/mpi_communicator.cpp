// MPI's world (Note [Data parallel ranks]); compiled only when CMake finds MPI (mpi_stub.cpp
// otherwise). Every call's return code is checked: MPI's default handler would abort with its own
// message, so the world's handler is MPI_ERRORS_RETURN and a failure becomes a Status naming the
// collective.
#include <mpi.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "dist/communicator.h"

namespace strata {

namespace {

Status mpi_status(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::ok_status();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return io_error(std::string(what) + " failed: " + std::string(text, static_cast<size_t>(len)));
}

template <typename T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
MPI_Datatype mpi_type<double>() {
  return MPI_DOUBLE;
}

class MpiWorld final : public Communicator {
 public:
  MpiWorld(int rank, int size) : rank_(rank), size_(size) {}
  ~MpiWorld() override { MPI_Finalize(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status all_reduce_sum(float* data, int64_t count) override { return reduce(data, count); }
  Status all_reduce_sum(double* data, int64_t count) override { return reduce(data, count); }
  Result<int64_t> all_reduce_max(int64_t value) override {
    int64_t out = value;
    STRATA_RETURN_IF_ERROR(
        mpi_status(MPI_Allreduce(&value, &out, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD),
                   "MPI_Allreduce (max)"));
    return out;
  }
  void abort_all(int code) override { MPI_Abort(MPI_COMM_WORLD, code); }
  std::string describe() const override {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string v(version, static_cast<size_t>(len));
    v = v.substr(0, v.find_first_of(",\n"));
    return "MPI (" + v + "), " + std::to_string(size_) + " ranks";
  }

 private:
  // Note [Deterministic all-reduce], one chunk at a time. Collectives run one at a time (the
  // ranks must call them in the same order anyway), which lets them share the scratch.
  template <typename T>
  Status reduce(T* data, int64_t count) {
    if (size_ == 1) return Status::ok_status();
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t at = 0; at < count; at += kAllReduceChunkElems) {
      STRATA_RETURN_IF_ERROR(reduce_chunk(data + at, std::min(kAllReduceChunkElems, count - at)));
    }
    return Status::ok_status();
  }

  template <typename T>
  Status reduce_chunk(T* data, int64_t n) {
    std::vector<int> counts(static_cast<size_t>(size_)), displs(counts.size());
    for (int r = 0; r < size_; ++r) {
      const Range s = shard_range(n, size_, r);
      counts[static_cast<size_t>(r)] = static_cast<int>(s.end - s.begin);
      displs[static_cast<size_t>(r)] = static_cast<int>(s.begin);
    }
    const Range mine = shard_range(n, size_, rank_);
    const int64_t len = mine.end - mine.begin;
    // parts: (size, len), row r = rank r's values of my shard; kept between calls (a block's
    // gradient per collective), grown only.
    std::vector<T>& parts = scratch<T>();
    if (parts.size() < static_cast<size_t>(size_ * len))
      parts.resize(static_cast<size_t>(size_ * len));
    std::vector<int> recv_counts(counts.size(), static_cast<int>(len)), recv_displs(counts.size());
    for (int r = 0; r < size_; ++r) recv_displs[static_cast<size_t>(r)] = static_cast<int>(r * len);
    STRATA_RETURN_IF_ERROR(mpi_status(
        MPI_Alltoallv(data, counts.data(), displs.data(), mpi_type<T>(), parts.data(),
                      recv_counts.data(), recv_displs.data(), mpi_type<T>(), MPI_COMM_WORLD),
        "MPI_Alltoallv (gradient reduce-scatter)"));
    sum_in_rank_order(data + mine.begin, parts.data(), size_, len, len);
    return mpi_status(MPI_Allgatherv(MPI_IN_PLACE, 0, mpi_type<T>(), data, counts.data(),
                                     displs.data(), mpi_type<T>(), MPI_COMM_WORLD),
                      "MPI_Allgatherv (gradient all-gather)");
  }

  template <typename T>
  std::vector<T>& scratch() {
    if constexpr (std::is_same_v<T, float>) {
      return scratch_f32_;
    } else {
      return scratch_f64_;
    }
  }

  int rank_, size_;
  std::mutex mu_;
  std::vector<float> scratch_f32_;   // (size, shard) of the largest chunk so far
  std::vector<double> scratch_f64_;  // the same for f64 collectives
};

}  // namespace

Result<std::unique_ptr<Communicator>> make_mpi_communicator() {
  // The plan's net queue calls MPI from its own thread while the main thread may call it between
  // steps (never at the same time, but MPI_THREAD_SERIALIZED would make that a promise the
  // executor's threads keep by luck): ask for MPI_THREAD_MULTIPLE.
  int provided = 0;
  int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  if (rc != MPI_SUCCESS) return mpi_status(rc, "MPI_Init_thread");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  auto world = std::make_unique<MpiWorld>(rank, size);
  if (provided < MPI_THREAD_MULTIPLE) {
    return unavailable("the MPI library gives thread level " + std::to_string(provided) +
                       ", but the plan's net queue needs MPI_THREAD_MULTIPLE (" +
                       std::to_string(MPI_THREAD_MULTIPLE) + ")");
  }
  return std::unique_ptr<Communicator>(std::move(world));
}

}  // namespace strata
