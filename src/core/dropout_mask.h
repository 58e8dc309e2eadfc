// A dropout mask that is a function of a position, not of a generator's state (Note [Adapter
// dropout] in model/lora.h): kernels on every device compute the same keep/drop for element i of
// a stream, in any order, so the forward and its recomputation in backward agree bit for bit.
#pragma once

#include <cstdint>

#include "core/dtype.h"  // STRATA_HOST_DEVICE

namespace strata {

// SplitMix64's finalizer (Steele, Lea and Flood 2014): a bijection of 64-bit words whose outputs
// for consecutive inputs look independent.
STRATA_HOST_DEVICE inline uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// One stream's mask: element i is kept when the top 24 bits of splitmix64(stream + i) are at
// least `threshold` (= floor(p * 2^24), p the drop probability); a kept element is scaled by
// `scale` (1 / (1 - p) in f32), a dropped one is 0.
struct DropoutMask {
  uint64_t stream = 0;
  uint32_t threshold = 0;
  float scale = 1.0f;
};

STRATA_HOST_DEVICE inline bool dropout_keeps(const DropoutMask& m, int64_t i) {
  return static_cast<uint32_t>(splitmix64(m.stream + static_cast<uint64_t>(i)) >> 40) >=
         m.threshold;
}

// The mask of drop probability p in [0, 1) for `stream`.
inline DropoutMask dropout_mask(uint64_t stream, double p) {
  DropoutMask m;
  m.stream = stream;
  m.threshold = static_cast<uint32_t>(p * 16777216.0);
  m.scale = 1.0f / (1.0f - static_cast<float>(p));
  return m;
}

}  // namespace strata
