// GPT-2 model pieces: the layer-major layout, deterministic init, and whole-model properties of
// the in-memory trainer (determinism, gradient accumulation, non-finite skipping, and a
// finite-difference check of the full backward).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "model/block_arch.h"
#include "model/init.h"
#include "model/layout.h"
#include "test_util.h"
#include "train/in_memory_trainer.h"

namespace strata {
namespace {

ModelConfig tiny_model() {
  ModelConfig m;
  m.vocab_size = 64;
  m.context_length = 16;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 32;
  return m;
}

TrainConfig tiny_train(int64_t B = 2, int64_t accum = 1) {
  TrainConfig c;
  c.model = tiny_model();
  c.batch_size = B;
  c.seq_len = 16;
  c.grad_accum = accum;
  c.steps = 10;
  c.optim.warmup_steps = 2;
  return c;
}

TEST(Layout, SlabsAreAlignedContiguousAndLayerMajor) {
  const ParamLayout l = make_param_layout(tiny_model());
  ASSERT_EQ(l.slabs.size(), 4u);  // embed, blk.0, blk.1, final
  EXPECT_EQ(l.slabs[1].name, "blk.0");
  int64_t expect_offset = 0;
  for (const Slab& s : l.slabs) {
    EXPECT_EQ(s.offset, expect_offset) << s.name;
    EXPECT_EQ(s.offset * 4 % 4096, 0) << s.name << " not 4 KiB aligned in f32";
    EXPECT_EQ(s.offset * 2 % 4096, 0) << s.name << " not 4 KiB aligned in bf16";
    expect_offset += s.numel;
    // every tensor of the slab lies inside it, in order, without overlap
    int64_t cursor = s.offset;
    for (int64_t i = s.first_tensor; i < s.first_tensor + s.tensor_count; i++) {
      const ParamTensor& t = l.tensors[static_cast<size_t>(i)];
      EXPECT_GE(t.offset, cursor) << t.name;
      cursor = t.offset + t.numel();
      EXPECT_LE(cursor, s.offset + s.numel) << t.name;
    }
  }
  EXPECT_EQ(expect_offset, l.total_elems);
  EXPECT_EQ(l.tensors[static_cast<size_t>(l.find("blk.1.attn_qkv.weight"))].shape, (Shape{96, 32}));
  EXPECT_EQ(l.find("blk.2.ln1.weight"), -1);
}

TEST(Layout, Gpt2SmallHasTheKnownParameterCount) {
  const ParamLayout l = make_param_layout(ModelConfig{ModelArch::gpt2, 50257, 1024, 12, 12, 768});
  EXPECT_EQ(l.parameter_count, 124439808);  // GPT-2 124M with tied embeddings
}

ModelConfig llama3_8b() {
  ModelConfig m;
  m.arch = ModelArch::llama;
  m.vocab_size = 128256;
  m.context_length = 8192;
  m.n_layer = 32;
  m.n_head = 32;
  m.n_embd = 4096;
  m.n_kv_head = 8;
  m.ffn_hidden = 14336;
  m.rope_theta = 500000;
  m.tie_embeddings = false;
  return m;
}

TEST(Layout, LlamaHasTheKnownParameterCountsAndPacksItsMatrices) {
  EXPECT_EQ(make_param_layout(llama3_8b()).parameter_count, 8030261248);  // Llama 3 8B
  ModelConfig m32 = llama3_8b();  // Llama 3.2 1B: 16 x 2048, 32 heads on 8, tied
  m32.n_layer = 16;
  m32.n_embd = 2048;
  m32.ffn_hidden = 8192;
  m32.tie_embeddings = true;
  EXPECT_EQ(make_param_layout(m32).parameter_count, 1235814400);

  ModelConfig m = llama3_8b();  // small, with shapes that are not multiples of 16
  m.vocab_size = 50;
  m.n_layer = 2;
  m.n_embd = 20;
  m.n_head = 2;
  m.n_kv_head = 1;
  m.ffn_hidden = 30;
  const ParamLayout l = make_param_layout(m);
  auto at = [&](const std::string& name) {
    const int64_t i = l.find(name);
    EXPECT_GE(i, 0) << name;
    return l.tensors[static_cast<size_t>(std::max<int64_t>(i, 0))];
  };
  // q|k|v and gate|up are one matrix each: no padding between them.
  EXPECT_EQ(at("blk.1.attn_k.weight").offset, at("blk.1.attn_q.weight").offset + 20 * 20);
  EXPECT_EQ(at("blk.1.attn_v.weight").offset, at("blk.1.attn_k.weight").offset + 10 * 20);
  EXPECT_EQ(at("blk.1.mlp_up.weight").offset, at("blk.1.mlp_gate.weight").offset + 30 * 20);
  EXPECT_EQ(at("blk.1.attn_out.weight").offset % kTensorAlignElems, 0);
  EXPECT_EQ(at("blk.1.attn_v.weight").hf_name, "model.layers.1.self_attn.v_proj.weight");
  EXPECT_EQ(at("lm_head.weight").slab, l.final_slab());
  EXPECT_EQ(l.find("wpe.weight"), -1);
  // The views by role: biases null, q|k|v at q, the head untied.
  std::vector<float> p(static_cast<size_t>(l.total_elems));
  const BlockView w = block_view(l, p.data(), 1);
  EXPECT_EQ(w.qkv_w, p.data() + at("blk.1.attn_q.weight").offset);
  EXPECT_EQ(w.fc_w, p.data() + at("blk.1.mlp_gate.weight").offset);
  EXPECT_EQ(w.ln1_b, nullptr);
  EXPECT_EQ(w.fcproj_b, nullptr);
  EXPECT_EQ(embed_view(l, p.data()).wpe, nullptr);
  const FinalView f = final_view(l, p.data());
  EXPECT_EQ(f.lm_head, p.data() + at("lm_head.weight").offset);
  EXPECT_EQ(lm_head_of(embed_view(l, p.data()), f), f.lm_head);
  // Norm gains start at 1, matrices at N(0, 0.02).
  init_params(l, p.data(), 5);
  EXPECT_EQ(p[static_cast<size_t>(at("blk.0.mlp_norm.weight").offset)], 1.0f);
  const ParamTensor& down = at("blk.0.mlp_down.weight");
  double ss = 0;
  for (int64_t i = 0; i < down.numel(); i++)
    ss += p[static_cast<size_t>(down.offset + i)] * p[static_cast<size_t>(down.offset + i)];
  EXPECT_NEAR(std::sqrt(ss / static_cast<double>(down.numel())), 0.02, 0.004);
}

TEST(Init, DeterministicPerSlabAndGpt2Statistics) {
  const ParamLayout l = make_param_layout(tiny_model());
  std::vector<float> a(static_cast<size_t>(l.total_elems)), b(a.size());
  init_params(l, a.data(), 42);
  init_params(l, b.data(), 42);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
  // One slab alone gives the same bits as the whole model's init.
  const Slab& s = l.slabs[static_cast<size_t>(l.block_slab(1))];
  std::vector<float> slab(static_cast<size_t>(s.numel));
  init_param_slab(l, l.block_slab(1), slab.data(), 42);
  EXPECT_EQ(std::memcmp(slab.data(), a.data() + s.offset, slab.size() * 4), 0);
  init_params(l, b.data(), 43);
  EXPECT_NE(std::memcmp(a.data(), b.data(), a.size() * 4), 0);

  const BlockView w = block_view(l, a.data(), 0);
  EXPECT_EQ(w.ln1_w[0], 1.0f);
  EXPECT_EQ(w.qkv_b[5], 0.0f);
  // std of a big matrix near 0.02; of a residual projection near 0.02/sqrt(2L)
  const ParamLayout big = make_param_layout(ModelConfig{ModelArch::gpt2, 256, 64, 8, 4, 256});
  std::vector<float> p(static_cast<size_t>(big.total_elems));
  init_params(big, p.data(), 1);
  auto stddev = [&](const std::string& name) {
    const ParamTensor& t = big.tensors[static_cast<size_t>(big.find(name))];
    double s2 = 0;
    for (int64_t i = 0; i < t.numel(); i++) s2 += double(p[t.offset + i]) * p[t.offset + i];
    return std::sqrt(s2 / static_cast<double>(t.numel()));
  };
  EXPECT_NEAR(stddev("blk.3.mlp_fc.weight"), 0.02, 0.0005);
  EXPECT_NEAR(stddev("blk.3.mlp_proj.weight"), 0.02 / std::sqrt(16.0), 0.0003);
}

struct Batch {
  std::vector<int32_t> in, tgt;
};
Batch random_batch(int64_t n, uint64_t seed, int32_t vocab) {
  Batch b;
  b.in = test::random_ints(n, seed, 0, vocab);
  b.tgt = test::random_ints(n, seed + 1000, 0, vocab);
  return b;
}

// Note [bf16 GEMMs]: a linear layer's forward and backward with a BlockGemm are, on the CPU, the
// f32 GEMMs of the bf16-rounded operands (the weights from the bf16 twin, x and dy rounded), bit
// for bit; the bias and its gradient stay f32. And that is not what the f32 layer computes.
TEST(Bf16Gemm, LinearIsTheF32GemmOfRoundedOperands) {
  const int64_t rows = 6, in = 40, out = 24;
  auto dev = create_cpu_device();
  auto s = dev->create_stream("test");
  std::vector<float> x = test::random_floats(rows * in, 1), w = test::random_floats(out * in, 2),
                     b = test::random_floats(out, 3), dy = test::random_floats(rows * out, 4);
  std::vector<bf16_t> w16(w.size());
  for (size_t i = 0; i < w.size(); ++i) w16[i] = f32_to_bf16(w[i]);
  std::vector<float> wr(w.size()), xr(x.size()), dyr(dy.size());
  round_to_bf16(wr.data(), w.data(), out * in);
  round_to_bf16(xr.data(), x.data(), rows * in);
  round_to_bf16(dyr.data(), dy.data(), rows * out);
  // Scratch for one layer of this size: dy and x rounded, rows x (out + in).
  std::vector<bf16_t> scratch(static_cast<size_t>(rows * (out + in)));
  // The f32 view is w itself: its bf16 twin is w16, element for element.
  const BlockGemm gemm{w16.data(), w.data(), scratch.data()};

  std::vector<float> y(rows * out), y_want(rows * out), y_f32(rows * out);
  linear_forward(*dev, *s, y.data(), x.data(), w.data(), b.data(), rows, in, out, &gemm);
  dev->matmul(*s, y_want.data(), xr.data(), wr.data(), b.data(), rows, out, in, {.trans_b = true});
  linear_forward(*dev, *s, y_f32.data(), x.data(), w.data(), b.data(), rows, in, out, nullptr);
  std::vector<float> dx(rows * in, 0.f), dw(out * in, 0.f), db(out, 0.f);
  std::vector<float> dx_want(dx), dw_want(dw), db_want(db), dx_f32(dx);
  linear_backward(*dev, *s, dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), rows,
                  in, out, &gemm);
  dev->matmul(*s, dx_want.data(), dyr.data(), wr.data(), nullptr, rows, in, out,
              {.accumulate = true});
  dev->matmul(*s, dw_want.data(), dyr.data(), xr.data(), nullptr, out, in, rows,
              {.trans_a = true, .accumulate = true});
  dev->bias_backward(*s, db_want.data(), dy.data(), rows, out);
  std::vector<float> dw_f32(out * in, 0.f), db_f32(out, 0.f);
  linear_backward(*dev, *s, dx_f32.data(), dw_f32.data(), db_f32.data(), dy.data(), x.data(),
                  w.data(), rows, in, out, nullptr);
  s->synchronize();
  test::expect_same_bits(y, y_want, "forward");
  test::expect_same_bits(dx, dx_want, "dx");
  test::expect_same_bits(dw, dw_want, "dW");
  test::expect_same_bits(db, db_want, "db (f32 dy)");
  EXPECT_NE(std::memcmp(y.data(), y_f32.data(), y.size() * 4), 0) << "bf16 forward is f32's";
  EXPECT_NE(std::memcmp(dx.data(), dx_f32.data(), dx.size() * 4), 0) << "bf16 dx is f32's";
}

// A config built in code skips parse_config: the trainers apply the same rule
// (check_matmul_needs_bf16_weights), in the config's words, before allocating anything.
TEST(InMemoryTrainer, Bf16GemmsOverF32WeightsAreRefused) {
  auto dev = create_cpu_device();
  TrainConfig c = tiny_train();
  c.matmul = MatmulPrecision::bf16;
  auto refused = InMemoryTrainer::create(*dev, c);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::invalid_argument);
  EXPECT_NE(refused.status().message().find("train.matmul is bf16 but train.precision is f32"),
            std::string::npos)
      << refused.status().message();
  c.precision = Precision::bf16;
  EXPECT_TRUE(InMemoryTrainer::create(*dev, c).ok());
}

TEST(InMemoryTrainer, TwoRunsGiveIdenticalBits) {
  auto dev = create_cpu_device();
  std::vector<std::vector<float>> finals;
  std::vector<std::vector<double>> losses(2);
  for (int run = 0; run < 2; run++) {
    auto t = InMemoryTrainer::create(*dev, tiny_train());
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    for (int step = 0; step < 4; step++) {
      Batch b = random_batch(32, static_cast<uint64_t>(step), 64);
      losses[static_cast<size_t>(run)].push_back(
          t.value()->train_step(b.in.data(), b.tgt.data()).value().loss);
    }
    std::vector<float> p(static_cast<size_t>(t.value()->layout().total_elems));
    ASSERT_TRUE(t.value()->read_params(p.data()).ok());
    finals.push_back(std::move(p));
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_EQ(std::memcmp(finals[0].data(), finals[1].data(), finals[0].size() * 4), 0);
}

TEST(InMemoryTrainer, GradientAccumulationMatchesOneLargeBatch) {
  auto dev = create_cpu_device();
  Batch b = random_batch(4 * 16, 7, 64);
  auto whole = InMemoryTrainer::create(*dev, tiny_train(4, 1));
  auto split = InMemoryTrainer::create(*dev, tiny_train(2, 2));
  ASSERT_TRUE(whole.ok() && split.ok());
  const StepStats a = whole.value()->train_step(b.in.data(), b.tgt.data()).value();
  const StepStats c = split.value()->train_step(b.in.data(), b.tgt.data()).value();
  EXPECT_NEAR(a.loss, c.loss, 1e-6 * a.loss);
  EXPECT_NEAR(a.grad_norm, c.grad_norm, 1e-5 * a.grad_norm);
  std::vector<float> pa(static_cast<size_t>(whole.value()->layout().total_elems)), pc(pa.size());
  ASSERT_TRUE(whole.value()->read_params(pa.data()).ok());
  ASSERT_TRUE(split.value()->read_params(pc.data()).ok());
  EXPECT_LE(test::max_rel_error(pc.data(), pa.data(), static_cast<int64_t>(pa.size())), 1e-5);
}

TEST(InMemoryTrainer, NonFiniteGradientSkipsTheUpdate) {
  auto dev = create_cpu_device();
  auto t = InMemoryTrainer::create(*dev, tiny_train());
  ASSERT_TRUE(t.ok());
  const ParamLayout& l = t.value()->layout();
  std::vector<float> p(static_cast<size_t>(l.total_elems));
  ASSERT_TRUE(t.value()->read_params(p.data()).ok());
  // An infinite bias in the first block's MLP makes the loss and every gradient non-finite.
  p[static_cast<size_t>(l.tensors[static_cast<size_t>(l.find("blk.0.mlp_fc.bias"))].offset)] =
      std::numeric_limits<float>::infinity();
  t.value()->write_params(p.data());
  Batch b = random_batch(32, 3, 64);
  const StepStats st = t.value()->train_step(b.in.data(), b.tgt.data()).value();
  EXPECT_TRUE(st.skipped);
  std::vector<float> after(p.size());
  ASSERT_TRUE(t.value()->read_params(after.data()).ok());
  EXPECT_EQ(std::memcmp(p.data(), after.data(), p.size() * 4), 0)
      << "a skipped step changed params";
}

TEST(InMemoryTrainer, FullBackwardAgreesWithFiniteDifferences) {
  // Central differences of the mean loss in double-checked f32, on a few entries of every kind of
  // tensor; the per-op tests check each op, this checks how the model wires them.
  auto dev = create_cpu_device();
  auto t = InMemoryTrainer::create(*dev, tiny_train());
  ASSERT_TRUE(t.ok());
  InMemoryTrainer& tr = *t.value();
  const ParamLayout& l = tr.layout();
  Batch b = random_batch(32, 11, 64);
  std::vector<float> p(static_cast<size_t>(l.total_elems)), g(p.size());
  ASSERT_TRUE(tr.read_params(p.data()).ok());
  tr.zero_grads();
  tr.forward_backward(b.in.data(), b.tgt.data(), 1.0f / 32);
  tr.read_grads(g.data());
  for (const char* name : {"wte.weight", "wpe.weight", "blk.0.attn_qkv.weight",
                           "blk.1.mlp_proj.bias", "blk.1.ln2.weight", "lnf.bias"}) {
    const ParamTensor& pt = l.tensors[static_cast<size_t>(l.find(name))];
    for (int64_t k = 0; k < 3; k++) {
      const int64_t i = pt.offset + (k * 7919) % pt.numel();
      const float eps = 1e-2f, saved = p[static_cast<size_t>(i)];
      p[static_cast<size_t>(i)] = saved + eps;
      tr.write_params(p.data());
      const double up = tr.forward_backward(b.in.data(), b.tgt.data(), 0.0f);
      p[static_cast<size_t>(i)] = saved - eps;
      tr.write_params(p.data());
      const double down = tr.forward_backward(b.in.data(), b.tgt.data(), 0.0f);
      p[static_cast<size_t>(i)] = saved;
      const double fd = (up - down) / (2.0 * eps);
      EXPECT_NEAR(g[static_cast<size_t>(i)], fd, 2e-3 * std::max(1.0, std::fabs(fd)) + 2e-4)
          << name << "[" << i - pt.offset << "]";
    }
  }
}

}  // namespace
}  // namespace strata
