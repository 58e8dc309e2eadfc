#include "backend/cuda/cuda_stream.h"

#include "backend/cuda/cuda_check.h"

namespace strata::cuda_backend {

CudaStream::CudaStream(std::string name, int ordinal) : name_(std::move(name)), ordinal_(ordinal) {
  STRATA_CUDA_CHECK(cudaSetDevice(ordinal_));
  STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaStream::~CudaStream() {
  // cudaStreamDestroy would return at once and let queued work finish later, but that work may
  // still use the GEMM workspace, which gemm_'s destruction hands back to the pool.
  (void)cudaSetDevice(ordinal_);
  (void)cudaStreamSynchronize(stream_);
  gemm_.reset();
  (void)cudaStreamDestroy(stream_);
}

void CudaStream::synchronize() {
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

GemmContext& CudaStream::gemm(const std::function<Buffer()>& make_workspace) {
  std::call_once(gemm_once_, [&] { gemm_ = std::make_unique<GemmContext>(make_workspace()); });
  return *gemm_;
}

CudaEvent::CudaEvent(int ordinal) {
  STRATA_CUDA_CHECK(cudaSetDevice(ordinal));
  STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
}

CudaEvent::~CudaEvent() {
  // Destroying an event still pending is allowed; CUDA releases it once it completes.
  (void)cudaEventDestroy(event_);
}

void CudaEvent::record(Stream& s) {
  STRATA_CUDA_CHECK(cudaEventRecord(event_, as_cuda(s).handle()));
}

void CudaEvent::wait(Stream& s) {
  STRATA_CUDA_CHECK(cudaStreamWaitEvent(as_cuda(s).handle(), event_, 0));
}

bool CudaEvent::query() {
  const cudaError_t err = cudaEventQuery(event_);
  if (err == cudaErrorNotReady) return false;  // not an error: the runtime does not record it
  STRATA_CUDA_CHECK(err);
  return true;
}

void CudaEvent::synchronize() {
  STRATA_CUDA_CHECK(cudaEventSynchronize(event_));
}

CudaStream& as_cuda(Stream& s) {
  auto* cs = dynamic_cast<CudaStream*>(&s);
  STRATA_CHECK_MSG(cs != nullptr, "a non-CUDA stream was handed to the CUDA device");
  return *cs;
}

}  // namespace strata::cuda_backend
