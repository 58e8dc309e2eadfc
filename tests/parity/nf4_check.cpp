// Strata's side of tests/nf4_torch.sh: block quantization (backend/quant.h) against the
// independent PyTorch reference tools/nf4_reference.py, bit for bit.
//   nf4_check write IN.safetensors            the inputs: random weights at many scales, exact
//                                              code multiples, ties, zeros, partial blocks
//   nf4_check compare IN.safetensors REF.safetensors
// compare quantizes every tensor of IN with cpu::ref::quantize and cpu::quantize in every format
// and checks the codes, the absmax (or nf4_dq's mean, scales and int8 absmax) and the
// dequantized values (ref and fast) against the reference's; exit 1 naming the first difference.
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/kernels_quant.h"
#include "backend/quant.h"
#include "core/rng.h"
#include "formats/safetensors.h"

using namespace strata;

namespace {

// Weights at scales 2^-20 .. 2^10 by block, a tenth zeros, a tenth exact codes times 2^k, and
// one block of zeros; n is no multiple of 64 and spans two nf4_dq groups.
std::vector<float> mixed(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t b = i / kQuantBlock;
    const float scale = std::ldexp(1.0f, static_cast<int>(b % 31) - 20);
    const double u = rng.next_unit();
    x[i] = u < 0.1   ? 0.0f
           : u < 0.2 ? kNf4Codes[rng.next_u64() % 16] * scale
                     : static_cast<float>(rng.next_normal()) * scale;
    if (b == 5) x[i] = 0.0f;
  }
  return x;
}

// Blocks whose absmax is 1 (element 0), then for each pair of neighbouring codes the f32 value
// nearest their midpoint and its neighbours a few ulps either side; then values near the int8
// half-way points (k + 0.5) / 127.
std::vector<float> ties() {
  std::vector<float> x;
  auto start_block = [&x] {
    while (x.size() % kQuantBlock != 0) x.push_back(0.0f);
    x.push_back(1.0f);
  };
  start_block();
  for (int c = 0; c < 15; ++c) {
    float v = static_cast<float>((static_cast<double>(kNf4Codes[c]) + kNf4Codes[c + 1]) / 2);
    for (int k = 0; k < 3; ++k) v = std::nextafter(v, -2.0f);
    for (int k = 0; k < 7; ++k, v = std::nextafter(v, 2.0f)) {
      if (x.size() % kQuantBlock == 0) start_block();
      x.push_back(v);
    }
  }
  start_block();
  for (int k = -127; k < 127; ++k) {
    if (x.size() % kQuantBlock == 0) start_block();
    x.push_back(static_cast<float>((k + 0.5) / 127.0));
  }
  return x;
}

int write_inputs(const std::string& path) {
  SafeTensors st;
  const std::vector<float> a = mixed(64 * 300 + 37, 7), b = mixed(5, 8), t = ties();
  st.add_f32("mixed", {static_cast<int64_t>(a.size())}, a.data());
  st.add_f32("tiny", {static_cast<int64_t>(b.size())}, b.data());
  st.add_f32("ties", {static_cast<int64_t>(t.size())}, t.data());
  const Status s = write_safetensors(path, st);
  if (!s.ok()) std::fprintf(stderr, "nf4_check: %s\n", s.to_string().c_str());
  return s.ok() ? 0 : 1;
}

// got == want word for word, or one line naming the first difference.
bool same_bits(const std::vector<uint32_t>& got, const std::vector<uint32_t>& want,
               const std::string& what) {
  if (got.size() != want.size()) {
    std::fprintf(stderr, "nf4_check: %s: %zu values, reference %zu\n", what.c_str(), got.size(),
                 want.size());
    return false;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      std::fprintf(stderr, "nf4_check: %s[%zu]: 0x%08x, reference 0x%08x\n", what.c_str(), i,
                   got[i], want[i]);
      return false;
    }
  }
  return true;
}

template <typename T>
std::vector<uint32_t> bits_of(const std::vector<T>& v) {
  std::vector<uint32_t> out;
  for (T x : v) out.push_back(std::bit_cast<uint32_t>(x));
  return out;
}

std::vector<float> f32_at(const std::vector<uint8_t>& q, int64_t offset, int64_t count) {
  std::vector<float> v(static_cast<size_t>(count));
  if (count > 0) std::memcpy(v.data(), q.data() + offset, static_cast<size_t>(4 * count));
  return v;
}

// The stored parts of q (fmt, n) in the reference's spelling: name suffix -> 32-bit words.
std::vector<std::pair<std::string, std::vector<uint32_t>>> parts(const std::vector<uint8_t>& q,
                                                                 QuantFormat fmt, int64_t n) {
  const QuantLayout l = quant_layout(fmt, n);
  std::vector<int32_t> codes;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t byte = q[l.codes + (fmt == QuantFormat::int8 ? i : i / 2)];
    codes.push_back(fmt == QuantFormat::int8 ? static_cast<int8_t>(byte)
                                             : (i % 2 == 0 ? byte >> 4 : byte & 0xF));
  }
  std::vector<std::pair<std::string, std::vector<uint32_t>>> p = {{"codes", bits_of(codes)}};
  if (fmt != QuantFormat::nf4_dq) {
    p.emplace_back("absmax", bits_of(f32_at(q, l.absmax, l.blocks)));
    return p;
  }
  std::vector<int32_t> qabs;
  for (int64_t b = 0; b < l.blocks; ++b) qabs.push_back(static_cast<int8_t>(q[l.qabsmax + b]));
  p.emplace_back("mean", bits_of(f32_at(q, l.mean, 1)));
  p.emplace_back("scales", bits_of(f32_at(q, l.scales, l.groups)));
  p.emplace_back("qabsmax", bits_of(qabs));
  return p;
}

// One tensor in one format, both CPU versions, against the reference; false after one line.
bool check_one(const SafeTensors& ref, const std::string& name, const std::vector<float>& x,
               QuantFormat fmt) {
  const auto n = static_cast<int64_t>(x.size());
  const std::string key = name + "." + quant_format_name(fmt) + ".";
  for (bool fast : {false, true}) {
    std::vector<uint8_t> q(static_cast<size_t>(quantized_bytes(fmt, n)));
    const Status s = fast ? cpu::quantize(q.data(), x.data(), fmt, n)
                          : cpu::ref::quantize(q.data(), x.data(), fmt, n);
    if (!s.ok()) {
      std::fprintf(stderr, "nf4_check: %s\n", s.to_string().c_str());
      return false;
    }
    const std::string how = fast ? " (fast)" : " (ref)";
    for (const auto& [suffix, got] : parts(q, fmt, n)) {
      const StTensor* t = ref.find(key + suffix);
      if (t == nullptr || t->data.size() != 4 * got.size()) {
        std::fprintf(stderr, "nf4_check: %s: missing or mis-sized in the reference\n",
                     (key + suffix).c_str());
        return false;
      }
      std::vector<uint32_t> want(got.size());
      std::memcpy(want.data(), t->data.data(), t->data.size());
      if (!same_bits(got, want, key + suffix + how)) return false;
    }
    std::vector<float> y(static_cast<size_t>(n));
    (fast ? cpu::dequantize : cpu::ref::dequantize)(y.data(), q.data(), fmt, n);
    auto want = ref.get_f32(key + "dequant");
    if (!want.ok()) {
      std::fprintf(stderr, "nf4_check: %s\n", want.status().to_string().c_str());
      return false;
    }
    if (!same_bits(bits_of(y), bits_of(*want), key + "dequant" + how)) return false;
  }
  return true;
}

int compare(const std::string& in_path, const std::string& ref_path) {
  auto in = read_safetensors(in_path);
  auto ref = read_safetensors(ref_path);
  if (!in.ok() || !ref.ok()) {
    std::fprintf(stderr, "nf4_check: %s\n",
                 (in.ok() ? ref.status() : in.status()).to_string().c_str());
    return 1;
  }
  int64_t values = 0;
  for (const StTensor& t : in->tensors) {
    const std::vector<float> x = *in->get_f32(t.name);
    for (QuantFormat fmt : {QuantFormat::nf4, QuantFormat::int8, QuantFormat::nf4_dq}) {
      if (!check_one(*ref, t.name, x, fmt)) return 1;
      values += static_cast<int64_t>(x.size());
    }
  }
  std::printf("nf4_check: %lld values in 3 formats identical to the PyTorch reference (%s)\n",
              static_cast<long long>(values),
              ref->metadata.count("torch") ? ref->metadata.at("torch").c_str() : "?");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "write") return write_inputs(argv[2]);
  if (argc == 4 && std::string(argv[1]) == "compare") return compare(argv[2], argv[3]);
  std::fprintf(stderr,
               "usage: nf4_check write IN.safetensors | nf4_check compare IN.safetensors "
               "REF.safetensors\n");
  return 2;
}
