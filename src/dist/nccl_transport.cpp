// PeerTransport over NCCL (dist/peer_transport.h), compiled when CMake finds NCCL beside the CUDA
// toolkit (nccl_stub.cpp otherwise). Like the CUDA backend's sources it stays out of the unity
// batches (Note [Unity build] in CMakeLists.txt): only what asks for it loads libnccl.
//
// NCCL refuses two ranks of one communicator on the same GPU ("Duplicate GPU detected", since
// NCCL 2.5): train/configured_device.cpp gives each rank of a machine its own GPU and does not
// ask for NCCL when the machine has fewer GPUs than ranks.
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "backend/cuda/cuda_stream.h"
#include "dist/communicator.h"
#include "dist/peer_transport.h"

namespace strata {

namespace {

Status nccl_status(ncclResult_t rc, const char* what, ncclComm_t comm = nullptr) {
  if (rc == ncclSuccess) return Status::ok_status();
  std::string text = std::string(what) + " failed: " + ncclGetErrorString(rc);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') text += " (" + std::string(last) + ")";
  return io_error(text);
}

class NcclPeerTransport final : public PeerTransport {
 public:
  NcclPeerTransport(ncclComm_t comm, int ordinal) : comm_(comm), ordinal_(ordinal) {}
  ~NcclPeerTransport() override { ncclCommDestroy(comm_); }

  Status start_group(Stream& s) override {
    stream_ = cuda_backend::as_cuda(s).handle();
    return nccl_status(ncclGroupStart(), "ncclGroupStart", comm_);
  }
  Status send(const void* data, int64_t bytes, int peer) override {
    return nccl_status(ncclSend(data, static_cast<size_t>(bytes), ncclInt8, peer, comm_, stream_),
                       "ncclSend", comm_);
  }
  Status recv(void* data, int64_t bytes, int peer) override {
    return nccl_status(ncclRecv(data, static_cast<size_t>(bytes), ncclInt8, peer, comm_, stream_),
                       "ncclRecv", comm_);
  }
  // The moves are enqueued on the group's stream: later work on it sees them done.
  Status end_group() override { return nccl_status(ncclGroupEnd(), "ncclGroupEnd", comm_); }
  std::string describe() const override {
    int v = 0;
    ncclGetVersion(&v);
    // NCCL_VERSION(X, Y, Z) is X * 10000 + Y * 100 + Z from 2.9 on.
    return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
           std::to_string(v % 100) + " (GPU " + std::to_string(ordinal_) + ")";
  }

 private:
  ncclComm_t comm_;
  int ordinal_;
  cudaStream_t stream_ = nullptr;  // the open group's
};

}  // namespace

Result<std::unique_ptr<PeerTransport>> make_nccl_peer_transport(Device& dev, Communicator& world) {
  if (dev.kind() != DeviceKind::cuda) {
    return unavailable("NCCL moves CUDA device memory, not the " + dev.name() + " device's");
  }
  const int ordinal = cuda_backend::as_cuda(*dev.create_stream("nccl-probe")).ordinal();
  ncclUniqueId id{};
  if (world.rank() == 0)
    STRATA_RETURN_IF_ERROR(nccl_status(ncclGetUniqueId(&id), "ncclGetUniqueId"));
  STRATA_RETURN_IF_ERROR(world.broadcast(&id, sizeof id, 0));
  if (cudaSetDevice(ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    return io_error("NCCL: cannot select CUDA device " + std::to_string(ordinal));
  }
  ncclComm_t comm = nullptr;
  STRATA_RETURN_IF_ERROR(
      nccl_status(ncclCommInitRank(&comm, world.size(), id, world.rank()), "ncclCommInitRank"));
  return std::unique_ptr<PeerTransport>(std::make_unique<NcclPeerTransport>(comm, ordinal));
}

}  // namespace strata
