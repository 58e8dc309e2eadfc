#include "backend/backend.h"

#include "core/check.h"

namespace strata {

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    device_ = o.device_;
    kind_ = o.kind_;
    data_ = o.data_;
    bytes_ = o.bytes_;
    o.device_ = nullptr;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void Buffer::reset() {
  if (data_ != nullptr) {
    STRATA_CHECK(device_ != nullptr);
    device_->free_buffer(*this);
  }
  device_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

void Device::launch_host_func(Stream& s, std::function<void()> fn) {
  // Default for backends without host callbacks: wait for the stream, then run inline. Correct
  // but serialising; backends override it.
  s.synchronize();
  fn();
}

Status Device::register_host_memory(void* p, int64_t bytes) {
  // A backend whose copies are plain memcpy (the CPU) reaches any host memory already.
  return Status::ok_status();
}

Status Device::unregister_host_memory(void* p) {
  return Status::ok_status();
}

void Device::matmul_bf16(Stream& s, float* out, const bf16_t* a, const bf16_t* b, const float* bias,
                         int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b,
                         bool accumulate) {
  STRATA_CHECK_MSG(false, ("matmul_bf16 is not implemented by the " + name() + " device").c_str());
}

Status Device::adamw_step(Stream& s, float* param, float* m, float* v, bf16_t* param_bf16,
                          const float* grad, int64_t n, const AdamWHyper& h) {
  return unavailable("the " + name() + " device has no on-device AdamW");
}

}  // namespace strata
