// Device memory for the CUDA device: a caching pool over cudaMalloc.
//
// Note [CUDA memory pool]
// cudaMalloc is slow and cudaFree synchronizes the whole device, so the pool never gives memory
// back to CUDA on the hot path: a freed block goes on the free list of its size class and the
// next request of that class takes it. Classes (class_bytes): 4 KiB for requests up to 4 KiB;
// up to 2 MiB, 2^k * {1, 1.25, 1.5, 1.75} in multiples of 4 KiB (<= 25% over); above, multiples
// of 2 MiB (< 2 MiB over).
// Training asks for the same few sizes every iteration, so a free list per class is enough.
// in_use counts the class bytes of live blocks (what the GPU holds for Strata), cached those of
// free ones. With a budget, in_use + cached stays within it: the cached blocks are released first
// (cudaFree: the one slow path), and only when in_use alone would pass it is the request refused
// (out_of_memory). Without one, the same release-and-retry happens when cudaMalloc runs out. A
// freed block is handed out again at once: Buffer::reset's contract (the caller guarantees no
// stream still uses it) makes that safe, exactly as on the CPU device.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace strata::cuda_backend {

class CudaPool {
 public:
  CudaPool(int ordinal, int64_t budget_bytes);  // budget 0: none
  ~CudaPool();                                  // releases the cached blocks
  CudaPool(const CudaPool&) = delete;
  CudaPool& operator=(const CudaPool&) = delete;

  // A block of at least `bytes` (class_bytes(bytes) in fact), 256-byte aligned.
  Result<void*> allocate(int64_t bytes);
  void release(void* p);  // p from allocate; goes on its class's free list

  // cudaFree every cached block (the caller must hold no expectation of speed here).
  void release_cached();

  int64_t in_use() const;
  int64_t peak() const;
  int64_t cached() const;
  int64_t budget() const { return budget_; }
  void reset_peak();

  static int64_t class_bytes(int64_t bytes);

 private:
  void release_cached_locked();

  const int ordinal_;
  const int64_t budget_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, int64_t> live_;     // block -> class bytes
  std::map<int64_t, std::vector<void*>> free_;  // class bytes -> cached blocks
  int64_t in_use_ = 0;
  int64_t peak_ = 0;
  int64_t cached_ = 0;
};

std::string format_mib(int64_t bytes);  // "12.0 MiB"

}  // namespace strata::cuda_backend
