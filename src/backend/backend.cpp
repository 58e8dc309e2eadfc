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

}  // namespace strata
