// create_cuda_device and cuda_device_count for builds without the CUDA backend (STRATA_CUDA=OFF, or
// no nvcc found at configure time). CMakeLists.txt compiles this file only then; with CUDA on,
// backend/cuda/cuda_device.cpp defines the real one.
#include "backend/backend.h"

namespace strata {

Result<std::unique_ptr<Device>> create_cuda_device(int ordinal, int64_t device_budget_bytes) {
  return unavailable("built without CUDA");
}

int cuda_device_count() {
  return 0;
}

}  // namespace strata
