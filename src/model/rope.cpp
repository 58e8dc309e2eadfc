#include "model/rope.h"

#include <cmath>

namespace strata {

namespace {
constexpr double kPi = 3.14159265358979323846;
}

std::vector<float> rope_inv_freq(const ModelConfig& m) {
  const int64_t hs = m.head_size(), half = hs / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; i++) {
    // HF: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), each step in float32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(hs);
    const float power = static_cast<float>(std::pow(m.rope_theta, static_cast<double>(exponent)));
    inv[static_cast<size_t>(i)] = 1.0f / power;
  }
  const RopeScaling& r = m.rope_scaling;
  if (r.type != RopeScalingKind::llama3) return inv;
  // HF's _compute_llama3_parameters, in float32 as its tensors are.
  const float factor = static_cast<float>(r.factor);
  const float low = static_cast<float>(r.low_freq_factor);
  const float high = static_cast<float>(r.high_freq_factor);
  const float old_ctx = static_cast<float>(r.original_context_length);
  const float low_freq_wavelen = old_ctx / low, high_freq_wavelen = old_ctx / high;
  for (float& f : inv) {
    const float wavelen = static_cast<float>(2 * kPi) / f;
    float scaled = wavelen > low_freq_wavelen ? f / factor : f;
    const float smooth = (old_ctx / wavelen - low) / (high - low);
    const float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    f = medium ? smoothed : scaled;
  }
  return inv;
}

std::vector<float> rope_table(const ModelConfig& m, int64_t positions) {
  const std::vector<float> inv = rope_inv_freq(m);
  const int64_t half = static_cast<int64_t>(inv.size());
  std::vector<float> table(static_cast<size_t>(positions * half * 2));
  for (int64_t t = 0; t < positions; t++) {
    for (int64_t i = 0; i < half; i++) {
      const float angle = static_cast<float>(t) * inv[static_cast<size_t>(i)];
      const size_t at = static_cast<size_t>((t * half + i) * 2);
      table[at] = static_cast<float>(std::cos(static_cast<double>(angle)));
      table[at + 1] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
  return table;
}

Result<Buffer> upload_rope_table(Device& dev, const ModelConfig& m, int64_t positions) {
  if (m.arch != ModelArch::llama) return Buffer();
  const std::vector<float> table = rope_table(m, positions);
  const int64_t bytes = static_cast<int64_t>(table.size() * sizeof(float));
  STRATA_ASSIGN_OR_RETURN(Buffer buf, dev.alloc(bytes));
  auto s = dev.create_stream("rope");
  dev.copy(*s, buf.data(), table.data(), bytes);
  s->synchronize();  // the host table dies with this call
  return buf;
}

}  // namespace strata
