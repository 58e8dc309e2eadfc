#include "backend/cuda/cuda_pool.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cstdio>

#include "backend/cuda/cuda_check.h"
#include "core/math_util.h"

namespace strata::cuda_backend {

namespace {

constexpr int64_t kPage = int64_t{4} << 10;       // smallest class
constexpr int64_t kLargeStep = int64_t{2} << 20;  // granularity above 2 MiB

}  // namespace

std::string format_mib(int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

CudaPool::CudaPool(int ordinal, int64_t budget_bytes) : ordinal_(ordinal), budget_(budget_bytes) {}

CudaPool::~CudaPool() {
  // Live blocks at this point belong to Buffers that outlived their device (a bug elsewhere);
  // they go with the CUDA context. Cached ones are ours to free; errors are ignored here, since a
  // device destroyed during process exit may find the runtime already shutting down.
  std::lock_guard<std::mutex> lock(mutex_);
  if (cudaSetDevice(ordinal_) != cudaSuccess) return;
  for (auto& [cls, blocks] : free_) {
    for (void* p : blocks) (void)cudaFree(p);
  }
}

int64_t CudaPool::class_bytes(int64_t bytes) {
  if (bytes <= kPage) return kPage;
  if (bytes > kLargeStep) return round_up(bytes, kLargeStep);
  const int64_t pow2 = static_cast<int64_t>(std::bit_floor(static_cast<uint64_t>(bytes)));
  if (pow2 == bytes) return bytes;
  return round_up(bytes, std::max(pow2 / 4, kPage));
}

Result<void*> CudaPool::allocate(int64_t bytes) {
  STRATA_CHECK(bytes >= 0);
  const int64_t cls = class_bytes(bytes);
  std::lock_guard<std::mutex> lock(mutex_);

  if (budget_ > 0 && in_use_ + cls > budget_) {
    return out_of_memory("device budget: allocating " + format_mib(cls) + " with " +
                         format_mib(in_use_) + " in use exceeds " + format_mib(budget_));
  }
  void* p = nullptr;
  auto it = free_.find(cls);
  if (it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    cached_ -= cls;
  } else {
    // A new block. Within a budget, the cache gives way first (in_use alone fits, checked above).
    if (budget_ > 0 && in_use_ + cached_ + cls > budget_) release_cached_locked();
    STRATA_CUDA_CHECK(cudaSetDevice(ordinal_));
    cudaError_t err = cudaMalloc(&p, static_cast<size_t>(cls));
    if (err == cudaErrorMemoryAllocation && cached_ > 0) {
      (void)cudaGetLastError();  // clear it: Note in cuda_check.h on STRATA_CUDA_LAUNCH_CHECK
      release_cached_locked();
      err = cudaMalloc(&p, static_cast<size_t>(cls));
    }
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      STRATA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
      return out_of_memory("cudaMalloc of " + format_mib(cls) + " on GPU " +
                           std::to_string(ordinal_) + " failed with " + format_mib(in_use_) +
                           " in use by Strata and " + format_mib(static_cast<int64_t>(free_bytes)) +
                           " free of " + format_mib(static_cast<int64_t>(total_bytes)));
    }
    STRATA_CUDA_CHECK(err);
  }
  live_.emplace(p, cls);
  in_use_ += cls;
  peak_ = std::max(peak_, in_use_);
  return p;
}

void CudaPool::release(void* p) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(p);
  STRATA_CHECK_MSG(it != live_.end(), "freeing a pointer the CUDA pool did not hand out");
  const int64_t cls = it->second;
  live_.erase(it);
  in_use_ -= cls;
  free_[cls].push_back(p);
  cached_ += cls;
}

void CudaPool::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

void CudaPool::release_cached_locked() {
  if (cached_ == 0) return;
  STRATA_CUDA_CHECK(cudaSetDevice(ordinal_));
  for (auto& [cls, blocks] : free_) {
    for (void* p : blocks) STRATA_CUDA_CHECK(cudaFree(p));
  }
  free_.clear();
  cached_ = 0;
}

int64_t CudaPool::in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_;
}

int64_t CudaPool::peak() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_;
}

int64_t CudaPool::cached() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}

void CudaPool::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  peak_ = in_use_;
}

}  // namespace strata::cuda_backend
