// Hugging Face GPT-2 names and layouts (model/hf_names.h): the table, the Conv1D transposes, and
// config.json. Exports and checkpoints load in other tools only if these are exactly right.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/hf_config.h"
#include "model/hf_names.h"
#include "model/layout.h"

namespace strata {
namespace {

// Small and with every dimension distinct (V, ctx, C, 3C, 4C), so a swapped shape cannot pass.
ModelConfig two_layer() {
  ModelConfig m;
  m.vocab_size = 37;
  m.context_length = 12;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 10;
  return m;
}

struct Expected {
  std::string strata;
  std::string hf;
  std::vector<int64_t> hf_shape;
  bool transposed;
};

// The table of hf_names.h written out for V=37, ctx=12, C=10, in layout order.
std::vector<Expected> expected_table() {
  std::vector<Expected> e = {{"wte.weight", "wte.weight", {37, 10}, false},
                             {"wpe.weight", "wpe.weight", {12, 10}, false}};
  for (int l = 0; l < 2; ++l) {
    const std::string s = "blk." + std::to_string(l) + ".", h = "h." + std::to_string(l) + ".";
    std::vector<Expected> block = {
        {s + "ln1.weight", h + "ln_1.weight", {10}, false},
        {s + "ln1.bias", h + "ln_1.bias", {10}, false},
        {s + "attn_qkv.weight", h + "attn.c_attn.weight", {10, 30}, true},
        {s + "attn_qkv.bias", h + "attn.c_attn.bias", {30}, false},
        {s + "attn_proj.weight", h + "attn.c_proj.weight", {10, 10}, true},
        {s + "attn_proj.bias", h + "attn.c_proj.bias", {10}, false},
        {s + "ln2.weight", h + "ln_2.weight", {10}, false},
        {s + "ln2.bias", h + "ln_2.bias", {10}, false},
        {s + "mlp_fc.weight", h + "mlp.c_fc.weight", {10, 40}, true},
        {s + "mlp_fc.bias", h + "mlp.c_fc.bias", {40}, false},
        {s + "mlp_proj.weight", h + "mlp.c_proj.weight", {40, 10}, true},
        {s + "mlp_proj.bias", h + "mlp.c_proj.bias", {10}, false},
    };
    e.insert(e.end(), block.begin(), block.end());
  }
  e.push_back({"lnf.weight", "ln_f.weight", {10}, false});
  e.push_back({"lnf.bias", "ln_f.bias", {10}, false});
  return e;
}

// Random bit patterns, NaNs excluded (a NaN's payload is not guaranteed through a float copy),
// so the round trip is checked on signs, zeros, denormals and every mantissa bit.
std::vector<float> random_bits(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    uint32_t bits;
    do {
      bits = static_cast<uint32_t>(rng.next_u64());
    } while ((bits & 0x7f800000u) == 0x7f800000u);
    std::memcpy(&x, &bits, sizeof x);
  }
  return v;
}

TEST(hf_names, names_and_shapes_match_the_table) {
  const ParamLayout layout = make_param_layout(two_layer());
  const std::vector<Expected> want = expected_table();
  ASSERT_EQ(layout.tensors.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(want[i].strata);
    EXPECT_EQ(layout.tensors[i].name, want[i].strata);
    const HfTensor h = hf_tensor(layout, static_cast<int64_t>(i));
    EXPECT_EQ(h.name, want[i].hf);
    EXPECT_EQ(h.shape, want[i].hf_shape);
    EXPECT_EQ(h.transposed, want[i].transposed);
  }
}

TEST(hf_names, round_trip_is_bit_exact_for_every_tensor) {
  const ParamLayout layout = make_param_layout(two_layer());
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const ParamTensor& t = layout.tensors[i];
    SCOPED_TRACE(t.name);
    const std::vector<float> strata = random_bits(t.numel(), 100 + i);
    std::vector<float> hf(strata.size()), back(strata.size());
    to_hf_layout(t, strata.data(), hf.data());
    from_hf_layout(t, hf.data(), back.data());
    EXPECT_EQ(std::memcmp(back.data(), strata.data(), strata.size() * sizeof(float)), 0);
    if (!hf_tensor(layout, static_cast<int64_t>(i)).transposed) {
      EXPECT_EQ(std::memcmp(hf.data(), strata.data(), strata.size() * sizeof(float)), 0);
    }
  }
}

TEST(hf_names, conv1d_weights_are_transposed) {
  const ParamLayout layout = make_param_layout(two_layer());
  for (const std::string name : {"blk.1.attn_qkv.weight", "blk.0.mlp_proj.weight"}) {
    SCOPED_TRACE(name);
    const int64_t index = layout.find(name);
    ASSERT_GE(index, 0);
    const ParamTensor& t = layout.tensors[static_cast<size_t>(index)];
    const int64_t rows = t.shape.dims[0], cols = t.shape.dims[1];  // Strata's (out, in)
    ASSERT_NE(rows, cols);
    // Element [r][c] holds r * cols + c, so each value says where it came from.
    std::vector<float> strata(static_cast<size_t>(rows * cols));
    for (int64_t i = 0; i < rows * cols; ++i) strata[i] = static_cast<float>(i);
    std::vector<float> hf(strata.size());
    to_hf_layout(t, strata.data(), hf.data());
    EXPECT_EQ(hf_tensor(layout, index).shape, (std::vector<int64_t>{cols, rows}));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(hf[c * rows + r], strata[r * cols + c]) << "[" << r << "][" << c << "]";
      }
    }
  }
}

TEST(hf_names, config_json_has_the_gpt2_fields) {
  const ModelConfig m = two_layer();
  const nlohmann::json j = nlohmann::json::parse(hf_config_json_for(m));
  EXPECT_EQ(j.at("model_type"), "gpt2");
  EXPECT_EQ(j.at("architectures"), nlohmann::json::array({"GPT2LMHeadModel"}));
  EXPECT_EQ(j.at("vocab_size"), 37);
  EXPECT_EQ(j.at("n_positions"), 12);
  EXPECT_EQ(j.at("n_ctx"), 12);
  EXPECT_EQ(j.at("n_embd"), 10);
  EXPECT_EQ(j.at("n_layer"), 2);
  EXPECT_EQ(j.at("n_head"), 2);
  EXPECT_TRUE(j.at("n_inner").is_null());  // HF's default: 4 * n_embd, as Strata's MLP
  EXPECT_EQ(j.at("activation_function"), "gelu_new");
  EXPECT_DOUBLE_EQ(j.at("layer_norm_epsilon").get<double>(), 1e-5);
  EXPECT_EQ(j.at("tie_word_embeddings"), true);
  for (const char* dropout : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) {
    EXPECT_EQ(j.at(dropout).get<double>(), 0.0) << dropout;
  }
}

}  // namespace
}  // namespace strata
