// Deterministic random numbers that do not depend on the standard library's distributions
// (which differ between implementations): splitmix64 and Box-Muller normals.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

namespace strata {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t next_u64() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // uniform in (0, 1]: never 0, so log() below is finite
  double next_unit() { return (static_cast<double>(next_u64() >> 11) + 1.0) * 0x1.0p-53; }
  // standard normal; two per Box-Muller pair, the second cached
  double next_normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double r = std::sqrt(-2.0 * std::log(next_unit()));
    const double theta = 2.0 * 3.14159265358979323846 * next_unit();
    spare_ = r * std::sin(theta);
    has_spare_ = true;
    return r * std::cos(theta);
  }
  uint64_t state() const { return state_; }

 private:
  uint64_t state_;
  double spare_ = 0;
  bool has_spare_ = false;
};

// Fisher-Yates over [first, last) with draws from `rng`: the same order on every machine (no
// std::shuffle, whose draws differ between standard libraries).
template <typename It>
void shuffle_range(It first, It last, Rng& rng) {
  for (auto i = last - first - 1; i > 0; --i) {
    const auto j = static_cast<decltype(i)>(rng.next_u64() % static_cast<uint64_t>(i + 1));
    std::swap(first[i], first[j]);
  }
}

// A seed for stream `index` derived from a base seed, so that e.g. each parameter tensor gets an
// independent sequence and initialising block 7 does not depend on blocks 0..6.
inline uint64_t derive_seed(uint64_t base, uint64_t index) {
  Rng r(base ^ (0xD1B54A32D192ED03ull * (index + 1)));
  return r.next_u64();
}

}  // namespace strata
