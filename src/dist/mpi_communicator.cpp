// MPI's world (Note [Data parallel ranks]); compiled only when CMake finds MPI (mpi_stub.cpp
// otherwise). Every call's return code is checked: MPI's default handler would abort with its own
// message, so the world's handler is MPI_ERRORS_RETURN and a failure becomes a Status naming the
// collective.
#include <mpi.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/backend.h"
#include "dist/communicator.h"
#include "dist/peer_transport.h"

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
  MpiWorld(int rank, int size, int local_rank, int local_size)
      : rank_(rank), size_(size), local_rank_(local_rank), local_size_(local_size) {}
  ~MpiWorld() override {
    for (auto& [bytes, type] : element_types_) MPI_Type_free(&type);
    MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  Status all_reduce_sum(float* data, int64_t count) override { return all_reduce(data, count); }
  Status all_reduce_sum(double* data, int64_t count) override { return all_reduce(data, count); }
  Status reduce_scatter_sum(float* data, int64_t count) override {
    if (size_ == 1) return Status::ok_status();
    STRATA_RETURN_IF_ERROR(check_count(count));
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t k = 0, n = rounds(count); k < n; ++k) {
      STRATA_RETURN_IF_ERROR(reduce_scatter_round(data, Pieces(*this, count, n, k)));
    }
    return Status::ok_status();
  }
  Status all_gather(void* data, int64_t count, int64_t elem_bytes) override {
    if (size_ == 1) return Status::ok_status();
    STRATA_RETURN_IF_ERROR(check_count(count));
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t k = 0, n = rounds(count); k < n; ++k) {
      STRATA_RETURN_IF_ERROR(all_gather_round(data, elem_bytes, Pieces(*this, count, n, k)));
    }
    return Status::ok_status();
  }
  Status broadcast(void* data, int64_t bytes, int root) override {
    if (size_ == 1) return Status::ok_status();
    std::lock_guard<std::mutex> lock(mu_);
    constexpr int64_t kMax = int64_t{1} << 30;
    for (int64_t at = 0; at < bytes; at += kMax) {
      const int n = static_cast<int>(std::min(kMax, bytes - at));
      STRATA_RETURN_IF_ERROR(
          mpi_status(MPI_Bcast(static_cast<char*>(data) + at, n, MPI_BYTE, root, MPI_COMM_WORLD),
                     "MPI_Bcast"));
    }
    return Status::ok_status();
  }
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
  // Round k of n of a collective over `count` elements (round_pieces) as MPI's counts and
  // displacements.
  struct Pieces {
    std::vector<int> counts, displs;
    int64_t mine_begin = 0, mine_len = 0;
    Pieces(const MpiWorld& w, int64_t count, int64_t n, int64_t k) {
      for (const Range& piece : round_pieces(count, w.size_, n, k)) {
        counts.push_back(static_cast<int>(piece.end - piece.begin));
        displs.push_back(static_cast<int>(piece.begin));
      }
      mine_begin = displs[static_cast<size_t>(w.rank_)];
      mine_len = counts[static_cast<size_t>(w.rank_)];
    }
  };

  static int64_t rounds(int64_t count) { return collective_rounds(count); }
  // MPI counts and displacements are int.
  static Status check_count(int64_t count) {
    if (count < (int64_t{1} << 31)) return Status::ok_status();
    return invalid_argument("a collective over " + std::to_string(count) +
                            " elements: MPI's counts stop at 2^31 - 1");
  }

  // Note [Deterministic all-reduce]: a reduce-scatter and an all-gather per round. Collectives
  // run one at a time (the ranks must call them in the same order anyway), which lets them share
  // the scratch.
  template <typename T>
  Status all_reduce(T* data, int64_t count) {
    if (size_ == 1) return Status::ok_status();
    STRATA_RETURN_IF_ERROR(check_count(count));
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t k = 0, n = rounds(count); k < n; ++k) {
      const Pieces p(*this, count, n, k);
      STRATA_RETURN_IF_ERROR(reduce_scatter_round(data, p));
      STRATA_RETURN_IF_ERROR(all_gather_round(data, sizeof(T), p));
    }
    return Status::ok_status();
  }

  template <typename T>
  Status reduce_scatter_round(T* data, const Pieces& p) {
    const int64_t len = p.mine_len;
    // parts: (size, len), row r = rank r's values of my piece; kept between calls, grown only.
    std::vector<T>& parts = scratch<T>();
    if (parts.size() < static_cast<size_t>(size_ * len))
      parts.resize(static_cast<size_t>(size_ * len));
    std::vector<int> recv_counts(p.counts.size(), static_cast<int>(len)),
        recv_displs(p.counts.size());
    for (int r = 0; r < size_; ++r) recv_displs[static_cast<size_t>(r)] = static_cast<int>(r * len);
    STRATA_RETURN_IF_ERROR(mpi_status(
        MPI_Alltoallv(data, p.counts.data(), p.displs.data(), mpi_type<T>(), parts.data(),
                      recv_counts.data(), recv_displs.data(), mpi_type<T>(), MPI_COMM_WORLD),
        "MPI_Alltoallv (reduce-scatter)"));
    sum_in_rank_order(data + p.mine_begin, parts.data(), size_, len, len);
    return Status::ok_status();
  }

  Status all_gather_round(void* data, int64_t elem_bytes, const Pieces& p) {
    STRATA_ASSIGN_OR_RETURN(const MPI_Datatype elem, element_type(elem_bytes));
    return mpi_status(MPI_Allgatherv(MPI_IN_PLACE, 0, elem, data, p.counts.data(), p.displs.data(),
                                     elem, MPI_COMM_WORLD),
                      "MPI_Allgatherv (all-gather)");
  }

  // An element of `bytes` bytes as one MPI type (displacements count elements, not bytes),
  // made once per width and kept until MPI_Finalize; called under mu_.
  Result<MPI_Datatype> element_type(int64_t bytes) {
    auto it = element_types_.find(bytes);
    if (it != element_types_.end()) return it->second;
    MPI_Datatype t;
    STRATA_RETURN_IF_ERROR(mpi_status(MPI_Type_contiguous(static_cast<int>(bytes), MPI_BYTE, &t),
                                      "MPI_Type_contiguous"));
    STRATA_RETURN_IF_ERROR(mpi_status(MPI_Type_commit(&t), "MPI_Type_commit"));
    element_types_.emplace(bytes, t);
    return t;
  }

  template <typename T>
  std::vector<T>& scratch() {
    if constexpr (std::is_same_v<T, float>) {
      return scratch_f32_;
    } else {
      return scratch_f64_;
    }
  }

  int rank_, size_, local_rank_, local_size_;
  std::mutex mu_;
  std::vector<float> scratch_f32_;                 // (size, piece) of the largest round so far
  std::vector<double> scratch_f64_;                // the same for f64 collectives
  std::map<int64_t, MPI_Datatype> element_types_;  // element_type's, by width in bytes
};

// PeerTransport over MPI (dist/peer_transport.h), for the CPU devices, whose memory the host
// addresses: the collectives on device memory run here without a GPU.
class MpiPeerTransport final : public PeerTransport {
 public:
  explicit MpiPeerTransport(MPI_Comm comm) : comm_(comm) {}
  ~MpiPeerTransport() override { MPI_Comm_free(&comm_); }

  Status start_group(Stream& s) override {
    s.synchronize();  // the data the moves read was written by work on s
    requests_.clear();
    return Status::ok_status();
  }
  Status send(const void* data, int64_t bytes, int peer) override {
    STRATA_RETURN_IF_ERROR(check_bytes(bytes));
    MPI_Request r;
    const int rc = MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, 0, comm_, &r);
    return post(rc, r, "MPI_Isend");
  }
  Status recv(void* data, int64_t bytes, int peer) override {
    STRATA_RETURN_IF_ERROR(check_bytes(bytes));
    MPI_Request r;
    const int rc = MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, 0, comm_, &r);
    return post(rc, r, "MPI_Irecv");
  }
  Status end_group() override {
    const int n = static_cast<int>(requests_.size());
    const int rc = MPI_Waitall(n, requests_.data(), MPI_STATUSES_IGNORE);
    requests_.clear();
    return mpi_status(rc, "MPI_Waitall (point-to-point)");
  }
  std::string describe() const override { return "MPI point-to-point"; }

 private:
  // A move posted (rc its call's result): the group's end waits for it.
  Status post(int rc, MPI_Request r, const char* what) {
    STRATA_RETURN_IF_ERROR(mpi_status(rc, what));
    requests_.push_back(r);
    return Status::ok_status();
  }
  static Status check_bytes(int64_t bytes) {
    if (bytes < (int64_t{1} << 31)) return Status::ok_status();
    return invalid_argument("a point-to-point move of " + std::to_string(bytes) +
                            " bytes: MPI's counts stop at 2^31 - 1");
  }

  MPI_Comm comm_;
  std::vector<MPI_Request> requests_;  // the open group's
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
  // The ranks sharing this rank's memory: its machine's.
  MPI_Comm local;
  rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  if (rc != MPI_SUCCESS) {
    MPI_Finalize();
    return mpi_status(rc, "MPI_Comm_split_type");
  }
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_size(local, &local_size);
  MPI_Comm_free(&local);
  auto world = std::make_unique<MpiWorld>(rank, size, local_rank, local_size);
  if (provided < MPI_THREAD_MULTIPLE) {
    return unavailable("the MPI library gives thread level " + std::to_string(provided) +
                       ", but the plan's net queue needs MPI_THREAD_MULTIPLE (" +
                       std::to_string(MPI_THREAD_MULTIPLE) + ")");
  }
  return std::unique_ptr<Communicator>(std::move(world));
}

Result<std::unique_ptr<PeerTransport>> make_mpi_peer_transport(Communicator& world) {
  if (dynamic_cast<MpiWorld*>(&world) == nullptr) {
    return unavailable("MPI point-to-point needs MPI's world, not " + world.describe());
  }
  MPI_Comm comm;  // its own, so its moves never meet the world's collectives
  STRATA_RETURN_IF_ERROR(mpi_status(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup"));
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::unique_ptr<PeerTransport>(std::make_unique<MpiPeerTransport>(comm));
}

}  // namespace strata
