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

namespace {

// A capability's name (the enumerator's own) and the slots behind it, for the message a caller
// reads when one is missing.
struct CapabilityText {
  const char* name;
  const char* slots;
};

CapabilityText capability_text(Capability c) {
  switch (c) {
    case Capability::host_registration:
      return {"host_registration", "register_host_memory, unregister_host_memory"};
    case Capability::host_callbacks:
      return {"host_callbacks", "launch_host_func"};
    case Capability::bf16_matmul:
      return {"bf16_matmul", "matmul_bf16"};
    case Capability::device_adamw:
      return {"device_adamw", "adamw_step"};
  }
  return {"unknown capability", "?"};
}

}  // namespace

const char* capability_name(Capability c) {
  return capability_text(c).name;
}

bool Device::supports(Capability c) const {
  return false;
}

Status Device::unsupported(Capability c) const {
  const CapabilityText text = capability_text(c);
  return unavailable("the " + name() + " device does not support " + text.name + " (" + text.slots +
                     ")");
}

// The defaults: a backend that lacks an optional slot does nothing and says so, the same way for
// every slot (Note [Optional device capabilities]).

Status Device::register_host_memory(void* p, int64_t bytes) {
  return unsupported(Capability::host_registration);
}

Status Device::unregister_host_memory(void* p) {
  return unsupported(Capability::host_registration);
}

Status Device::launch_host_func(Stream& s, std::function<void()> fn) {
  return unsupported(Capability::host_callbacks);
}

Status Device::matmul_bf16(Stream& s, float* out, const bf16_t* a, const bf16_t* b,
                           const float* bias, int64_t M, int64_t N, int64_t K, MatmulOpts o) {
  return unsupported(Capability::bf16_matmul);
}

Status Device::adamw_step(Stream& s, float* param, float* m, float* v, bf16_t* param_bf16,
                          const float* grad, int64_t n, const AdamWHyper& h) {
  return unsupported(Capability::device_adamw);
}

}  // namespace strata
