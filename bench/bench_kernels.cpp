// Strata's side of bench/kernels_vs_torch.sh.
//   bench_kernels block [reps]  forward+backward of one GPT-2-small block (C=768, NH=12,
//                               T=1024) for B = 1..4
//   bench_kernels step [reps]   one full training step of GPT-2 124M (B=1, T=1024): forward,
//                               backward, global norm, clipping, AdamW
// Prints one JSON object (last line) with every timed repetition, so the driver can take
// medians of interleaved runs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/rng.h"
#include "model/block.h"
#include "model/init.h"
#include "train/in_memory_trainer.h"

using namespace strata;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void fill_normal(float* p, int64_t n, uint64_t seed, double std) {
  Rng r(seed);
  for (int64_t i = 0; i < n; i++) p[i] = static_cast<float>(std * r.next_normal());
}

nlohmann::json bench_block(int reps) {
  ModelConfig m;
  m.vocab_size = 256;
  m.context_length = 1024;
  m.n_layer = 1;
  m.n_head = 12;
  m.n_embd = 768;
  const ParamLayout layout = make_param_layout(m);
  const Slab& slab = layout.slabs[static_cast<size_t>(layout.block_slab(0))];
  auto dev = create_cpu_device();
  auto stream = dev->create_stream("compute");
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t B = 1; B <= 4; B++) {
    const int64_t T = 1024, C = m.n_embd;
    const BlockDims d = block_dims(*dev, m, B, T);
    Buffer params = dev->alloc(layout.total_elems * 4).value();
    Buffer grads = dev->alloc(layout.total_elems * 4).value();
    Buffer acts = dev->alloc(block_acts_floats(d) * 4).value();
    Buffer scratch = dev->alloc(block_grad_scratch_floats(d) * 4).value();
    Buffer x = dev->alloc(B * T * C * 4).value();   // (B, T, C) block input
    Buffer y = dev->alloc(B * T * C * 4).value();   // (B, T, C) block output
    Buffer dy = dev->alloc(B * T * C * 4).value();  // (B, T, C) output gradient
    Buffer dx = dev->alloc(B * T * C * 4).value();  // (B, T, C) input gradient
    init_param_slab(layout, layout.block_slab(0), params.f32() + slab.offset, 1);
    fill_normal(x.f32(), B * T * C, 2, 1.0);
    fill_normal(dy.f32(), B * T * C, 3, 1e-3);
    const BlockView w = block_view(layout, params.f32(), 0);
    const BlockView gw = block_view(layout, grads.f32(), 0);
    FloatCarver acts_carver(acts.f32()), scratch_carver(scratch.f32());
    const BlockActs a = block_acts_carve(acts_carver, d);
    const BlockGradScratch g = block_grad_scratch_carve(scratch_carver, d);
    std::vector<double> times;
    for (int r = 0; r <= reps; r++) {  // r == 0 warms up
      const auto t0 = Clock::now();
      dev->fill_zero(*stream, dx.data(), B * T * C * 4);
      block_forward(*dev, *stream, y.f32(), a, x.f32(), w, d);
      block_backward(*dev, *stream, dx.f32(), gw, g, dy.f32(), x.f32(), a, w, d);
      stream->synchronize();
      if (r > 0) times.push_back(seconds_since(t0));
    }
    rows.push_back({{"B", B}, {"tokens", B * T}, {"times_s", times}});
  }
  return {{"impl", "strata"}, {"mode", "block"}, {"rows", rows}};
}

nlohmann::json bench_step(int reps) {
  TrainConfig cfg;
  cfg.model = ModelConfig{ModelArch::gpt2, 50257, 1024, 12, 12, 768};
  cfg.batch_size = 1;
  cfg.seq_len = 1024;
  cfg.steps = reps + 1;
  cfg.optim.warmup_steps = 0;
  auto dev = create_cpu_device();
  auto trainer = InMemoryTrainer::create(*dev, cfg);
  if (!trainer.ok()) {
    std::fprintf(stderr, "bench_kernels: %s\n", trainer.status().to_string().c_str());
    std::exit(1);
  }
  std::vector<int32_t> tokens(1025);
  Rng r(5);
  for (auto& t : tokens) t = static_cast<int32_t>(r.next_u64() % 50257);
  std::vector<double> times;
  for (int i = 0; i <= reps; i++) {
    auto st = trainer.value()->train_step(tokens.data(), tokens.data() + 1);
    if (!st.ok()) {
      std::fprintf(stderr, "bench_kernels: %s\n", st.status().to_string().c_str());
      std::exit(1);
    }
    if (i > 0) times.push_back(st->seconds);
  }
  return {{"impl", "strata"}, {"mode", "step"}, {"tokens", 1024}, {"times_s", times}};
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const int reps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
  if (mode == "block") {
    std::printf("%s\n", bench_block(reps).dump().c_str());
  } else if (mode == "step") {
    std::printf("%s\n", bench_step(reps).dump().c_str());
  } else {
    std::fprintf(stderr, "usage: bench_kernels block|step [reps]\n");
    return 2;
  }
  return 0;
}
