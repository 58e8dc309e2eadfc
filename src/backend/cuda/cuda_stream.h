// CUDA streams and events behind the Stream/Event interface (Note [Asynchronous by contract] in
// backend/backend.h): a non-blocking cudaStream_t, so Strata's streams never serialize against
// the legacy default stream, and a timing-free cudaEvent_t (cheaper to record and wait on).
//
// The CUDA semantics are the interface's: an event never recorded counts as complete
// (cudaEventQuery returns cudaSuccess, cudaStreamWaitEvent does nothing), and a wait holds for
// the most recent record made before the wait was enqueued, not for later re-records.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/cuda_gemm.h"

namespace strata::cuda_backend {

class CudaStream final : public Stream {
 public:
  CudaStream(std::string name, int ordinal);
  // Waits for the stream's work, so that its workspace can go back to the pool, then destroys it.
  ~CudaStream() override;

  const std::string& name() const override { return name_; }
  void synchronize() override;

  cudaStream_t handle() const { return stream_; }
  int ordinal() const { return ordinal_; }
  // This stream's cuBLASLt state, made on its first GEMM with the workspace make_workspace gives.
  GemmContext& gemm(const std::function<Buffer()>& make_workspace);

 private:
  std::string name_;
  int ordinal_;
  cudaStream_t stream_ = nullptr;
  std::once_flag gemm_once_;
  std::unique_ptr<GemmContext> gemm_;
};

class CudaEvent final : public Event {
 public:
  explicit CudaEvent(int ordinal);
  ~CudaEvent() override;

  void record(Stream& s) override;
  void wait(Stream& s) override;
  bool query() override;
  void synchronize() override;

 private:
  cudaEvent_t event_ = nullptr;
};

CudaStream& as_cuda(Stream& s);

}  // namespace strata::cuda_backend
