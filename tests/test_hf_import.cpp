// Hugging Face import (Note [Hugging Face import] in formats/hf_import.h, Note [Hugging Face configs]
// in model/hf_config.h):
//  - F16 widens exactly: every one of the 65536 values against ldexp, subnormals, infinities,
//    NaN payloads and signed zeros;
//  - config.json: GPT-2 and Llama configs round-trip through hf_config_json_for, absent fields
//    take HF's defaults, and everything Strata cannot train is refused with one line naming the
//    file and the field;
//  - GPT-2 (single file and sharded; F32, BF16, F16; "transformer." names, ignorable buffers and
//    a tied lm_head) and Llama (grouped-query, untied and tied) imported into a trainer give
//    exactly the file's values in Strata's layout (Conv1D weights transposed back, padding zero),
//    AdamW moments zero and the step counters at 0, for the in-memory trainer and for the
//    vertical one with its state on storage (whose pieces cut tensors); host memory is one read
//    chunk and at most two tensors;
//  - refused with one line naming the file and the tensor: a truncated shard, a missing tensor,
//    a wrong shape, an integer dtype, an index naming a missing file, an unknown tensor, a tensor
//    under two names, an index that disagrees with its shards, an unsupported model_type;
//  - import -> checkpoint at step 0 -> strata export -> import is bit-identical, and the export
//    of an F32 model holds the original tensors' bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/config.h"
#include "core/dtype.h"
#include "formats/checkpoint.h"
#include "io/configured_engine.h"
#include "formats/hf_export.h"
#include "formats/hf_import.h"
#include "formats/safetensors.h"
#include "formats/safetensors_f32.h"
#include "model/hf_config.h"
#include "model/hf_names.h"
#include "model/layout.h"
#include "train/trainer.h"
#include "test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// ---- F16 ----------------------------------------------------------------------------------------

// binary16 by its definition, in doubles: (-1)^s 2^(e-15) (1 + m/1024), subnormal m 2^-24.
double f16_reference(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = 0;
  if (e == 0) {
    v = std::ldexp(m, -24);
  } else if (e == 31) {
    v = m == 0 ? INFINITY : NAN;
  } else {
    v = std::ldexp(1024 + m, e - 25);
  }
  return s ? -v : v;
}

TEST(hf_import_f16, EveryValueExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float got = f16_to_f32(static_cast<uint16_t>(h));
    const double want = f16_reference(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
      EXPECT_EQ(bits_of(got) >> 31, h >> 15) << std::hex << h;                   // sign kept
      EXPECT_EQ(bits_of(got) & 0x7fffffu, (h & 0x3ffu) << 13) << std::hex << h;  // payload kept
      continue;
    }
    // Exact, and the sign of zero too.
    ASSERT_EQ(bits_of(got), bits_of(static_cast<float>(want))) << std::hex << h;
    ASSERT_EQ(static_cast<double>(got), want) << std::hex << h;
#ifdef __FLT16_MANT_DIG__  // the compiler's own _Float16, where it has one
    _Float16 native;
    const uint16_t hh = static_cast<uint16_t>(h);
    std::memcpy(&native, &hh, 2);
    ASSERT_EQ(bits_of(static_cast<float>(native)), bits_of(got)) << std::hex << h;
#endif
  }
}

TEST(hf_import_f16, SpecialValues) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);                  // the largest finite
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));     // the smallest normal
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));     // the smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));  // the largest subnormal
  EXPECT_EQ(f16_to_f32(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(bits_of(f16_to_f32(0x8000)), 0x80000000u);  // -0
  EXPECT_EQ(bits_of(f16_to_f32(0x0000)), 0u);
  EXPECT_EQ(f16_to_f32(0x7c00), INFINITY);
  EXPECT_EQ(f16_to_f32(0xfc00), -INFINITY);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_EQ(bits_of(f16_to_f32(0x7e00)), 0x7fc00000u);  // the quiet NaN is f32's
  EXPECT_EQ(bits_of(f16_to_f32(0x7d01)), 0x7fa02000u);  // a signalling NaN stays one
}

TEST(hf_import_f16, WidenEachFloatDtype) {
  const float f[3] = {1.5f, -0.25f, 3e-41f};
  std::vector<float> out(3);
  widen_to_f32(StDType::f32, reinterpret_cast<const uint8_t*>(f), 3, out.data());
  EXPECT_EQ(0, std::memcmp(out.data(), f, sizeof f));
  const uint16_t b[3] = {f32_to_bf16(1.5f), f32_to_bf16(-0.25f), 0xff80};
  widen_to_f32(StDType::bf16, reinterpret_cast<const uint8_t*>(b), 3, out.data());
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -0.25f);
  EXPECT_EQ(out[2], -INFINITY);
  const uint16_t h[3] = {0x3e00, 0xb400, 0x0002};
  widen_to_f32(StDType::f16, reinterpret_cast<const uint8_t*>(h), 3, out.data());
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -0.25f);
  EXPECT_EQ(out[2], std::ldexp(2.0f, -24));
  EXPECT_FALSE(is_float_dtype(StDType::i32));
  EXPECT_FALSE(is_float_dtype(StDType::u16));
}

// ---- config.json --------------------------------------------------------------------------------

ModelConfig gpt2_model() {
  ModelConfig m;
  m.vocab_size = 64;
  m.context_length = 16;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 32;
  return m;
}

ModelConfig llama_model(bool tied) {
  ModelConfig m;
  m.arch = ModelArch::llama;
  m.vocab_size = 64;
  m.context_length = 16;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.n_embd = 32;
  m.ffn_hidden = 48;
  m.rope_theta = 500000;
  m.norm_eps = 1e-5;
  m.tie_embeddings = tied;
  return m;
}

void expect_same_model(const ModelConfig& a, const ModelConfig& b) {
  auto d = model_difference(a, b);
  EXPECT_FALSE(d.has_value()) << d->key << ": " << d->a << " vs " << d->b;
}

Result<ModelConfig> from_text(const std::string& text) {
  return model_config_from_hf(json::parse(text), "hf/config.json");
}

TEST(hf_import_config, Gpt2RoundTrips) {
  const ModelConfig m = gpt2_model();
  const std::string text = hf_config_json_for(m);
  const json j = json::parse(text);
  EXPECT_EQ(j.at("model_type"), "gpt2");
  EXPECT_EQ(j.at("architectures"), json::array({"GPT2LMHeadModel"}));
  EXPECT_EQ(j.at("n_positions"), 16);
  EXPECT_EQ(j.at("n_ctx"), 16);
  EXPECT_EQ(j.at("activation_function"), "gelu_new");
  EXPECT_EQ(j.at("layer_norm_epsilon"), 1e-5);
  EXPECT_EQ(j.at("tie_word_embeddings"), true);
  auto back = from_text(text);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  expect_same_model(*back, m);
}

TEST(hf_import_config, LlamaRoundTrips) {
  for (bool tied : {false, true}) {
    for (bool scaled : {false, true}) {
      ModelConfig m = llama_model(tied);
      if (scaled) {
        m.rope_scaling.type = RopeScalingKind::llama3;
        m.rope_scaling.factor = 32;
        m.rope_scaling.low_freq_factor = 1;
        m.rope_scaling.high_freq_factor = 4;
        m.rope_scaling.original_context_length = 8;
      }
      const std::string text = hf_config_json_for(m);
      const json j = json::parse(text);
      EXPECT_EQ(j.at("model_type"), "llama");
      EXPECT_EQ(j.at("architectures"), json::array({"LlamaForCausalLM"}));
      EXPECT_EQ(j.at("torch_dtype"), "float32");
      EXPECT_EQ(j.at("num_key_value_heads"), 2);
      EXPECT_EQ(j.at("intermediate_size"), 48);
      EXPECT_EQ(j.at("rope_scaling").is_null(), !scaled);
      auto back = from_text(text);
      ASSERT_TRUE(back.ok()) << back.status().to_string();
      expect_same_model(*back, m);
    }
  }
}

// Models spelled with defaults come back in the canonical form, which is the same model.
TEST(hf_import_config, CanonicalForm) {
  ModelConfig m = llama_model(false);
  m.n_kv_head = 0;   // = n_head
  m.ffn_hidden = 0;  // = 4 C
  auto back = from_text(hf_config_json_for(m));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->n_kv_head, 4);
  EXPECT_EQ(back->ffn_hidden, 128);
  expect_same_model(*back, hf_canonical(m));
  ModelConfig g = gpt2_model();
  g.n_kv_head = g.n_head;
  expect_same_model(hf_canonical(g), gpt2_model());
}

TEST(hf_import_config, AbsentFieldsTakeHfDefaults) {
  auto m = from_text(R"({"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 2,
      "num_attention_heads": 4, "intermediate_size": 48, "vocab_size": 64,
      "max_position_embeddings": 16})");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->n_kv_head, 4);
  EXPECT_EQ(m->rope_theta, 10000.0);
  EXPECT_EQ(m->norm_eps, 1e-6);
  EXPECT_FALSE(m->tie_embeddings);
  EXPECT_EQ(m->rope_scaling.type, RopeScalingKind::none);
  auto g = from_text(R"({"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 2,
      "vocab_size": 64, "n_positions": 16})");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  expect_same_model(*g, gpt2_model());
}

// Each edit of a valid config.json is refused with one line naming the file and these parts.
struct Refusal {
  std::string arch, key;
  json value;  // null: the key removed
  std::vector<std::string> parts;
};

TEST(hf_import_config, RefusesWhatStrataCannotTrain) {
  const std::vector<Refusal> refusals = {
      {"gpt2", "model_type", "qwen2", {"model_type \"qwen2\"", "gpt2 and llama"}},
      {"gpt2", "model_type", "mistral", {"\"mistral\"", "not supported"}},
      {"gpt2", "activation_function", "relu", {"activation_function", "'relu'", "gelu_new"}},
      {"gpt2", "layer_norm_epsilon", 1e-6, {"layer_norm_epsilon", "1e-06"}},
      {"gpt2", "n_inner", 100, {"n_inner", "100"}},
      {"gpt2", "n_ctx", 8, {"n_ctx 8", "n_positions 16"}},
      {"gpt2", "tie_word_embeddings", false, {"tie_word_embeddings"}},
      {"gpt2", "n_embd", nullptr, {"n_embd is missing", "gpt2"}},
      {"gpt2", "n_layer", 2.5, {"n_layer must be a positive integer", "2.5"}},
      {"gpt2", "n_head", 0, {"n_head must be a positive integer"}},
      {"gpt2", "n_head", 3, {"n_embd", "n_head"}},
      {"llama", "attention_bias", true, {"attention_bias"}},
      {"llama", "mlp_bias", true, {"mlp_bias"}},
      {"llama", "hidden_act", "gelu", {"hidden_act", "'gelu'", "silu"}},
      {"llama", "head_dim", 16, {"head_dim", "16", "8"}},
      {"llama", "rope_scaling", {{"rope_type", "yarn"}, {"factor", 4}}, {"rope_scaling", "'yarn'"}},
      {"llama", "rope_scaling", {{"type", "linear"}, {"factor", 4}}, {"rope_scaling", "'linear'"}},
      {"llama", "rope_scaling", {{"rope_type", "llama3"}, {"factor", 8}}, {"low_freq_factor"}},
      {"llama", "num_key_value_heads", 3, {"num_attention_heads 4", "num_key_value_heads 3"}},
      {"llama", "hidden_size", "32", {"hidden_size must be a positive integer", "\"32\""}},
      {"llama", "intermediate_size", nullptr, {"intermediate_size is missing"}},
      {"llama", "tie_word_embeddings", "yes", {"tie_word_embeddings must be true or false"}},
  };
  for (const Refusal& r : refusals) {
    json j = json::parse(hf_config_json_for(r.arch == "gpt2" ? gpt2_model() : llama_model(false)));
    if (r.value.is_null()) {
      j.erase(r.key);
    } else {
      j[r.key] = r.value;
    }
    auto m = model_config_from_hf(j, "hf/config.json");
    SCOPED_TRACE(r.arch + " " + r.key + " = " + r.value.dump());
    ASSERT_FALSE(m.ok());
    std::vector<std::string> parts = {"hf/config.json"};
    parts.insert(parts.end(), r.parts.begin(), r.parts.end());
    for (const std::string& p : parts) {
      EXPECT_NE(m.status().message().find(p), std::string::npos) << m.status().to_string();
    }
    EXPECT_EQ(m.status().code(), ErrorCode::bad_format);
    EXPECT_EQ(m.status().message().find('\n'), std::string::npos);
  }
}

// ---- Fixtures: HF model directories written here
// -------------------------------------------------

struct FixtureOptions {
  StDType dtype = StDType::f32;
  int shards = 1;
  bool prefix = false;   // GPT-2: "transformer." names
  bool buffers = false;  // the buffers HF's loader ignores
  bool lm_head = false;  // a tied model's lm_head.weight copy
  // Applied to the tensors (HF names, values in HF layout) before they are written.
  std::function<void(std::vector<StTensor>&)> edit;
};

struct Fixture {
  std::string dir;
  ModelConfig model;
  std::vector<StTensor> tensors;  // as written, in order
  std::vector<float> expected;    // Strata's layout (total_elems), padding zero
  std::vector<std::string> shards;
};

// n values exactly representable in `dtype`, as its raw bytes, and their f32 values.
void random_values(StDType dtype, int64_t n, uint64_t seed, std::vector<uint8_t>& bytes,
                   std::vector<float>& values) {
  const std::vector<float> r = test::random_floats(n, seed, -2.0f, 2.0f);
  values.resize(static_cast<size_t>(n));
  bytes.resize(static_cast<size_t>(n * st_dtype_size(dtype)));
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == StDType::f32) {
      values[i] = r[i];
      std::memcpy(&bytes[4 * i], &r[i], 4);
      continue;
    }
    uint16_t h = 0;
    if (dtype == StDType::bf16) {
      h = f32_to_bf16(r[i]);
      values[i] = bf16_to_f32(h);
    } else {
      // Sign, exponent 5..19 (about 2^-10 .. 2^4) and mantissa from the draw; a few
      // subnormals, zeros and the largest value at the start of every tensor.
      const uint32_t u = bits_of(r[i]);
      h = static_cast<uint16_t>((u >> 31) << 15 | (5 + (u >> 8) % 15) << 10 | (u & 0x3ff));
      static const uint16_t specials[] = {0x0001, 0x83ff, 0x0000, 0x8000, 0x7bff, 0x0200};
      if (i < 6) h = specials[i];
      values[i] = static_cast<float>(f16_reference(h));
    }
    std::memcpy(&bytes[2 * i], &h, 2);
  }
}

StTensor make_tensor(const std::string& name, StDType dtype, std::vector<int64_t> shape,
                     std::vector<uint8_t> bytes) {
  StTensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = std::move(bytes);
  return t;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  f << text;
  ASSERT_TRUE(f.good()) << path;
}

// A Hugging Face directory for `m`: config.json and the weights under HF names and shapes.
Fixture write_fixture(const std::string& name, const ModelConfig& m, const FixtureOptions& o) {
  Fixture fx;
  fx.dir = test::make_temp_dir("hf_import/" + name);
  fx.model = m;
  const ParamLayout layout = make_param_layout(m);
  fx.expected.assign(static_cast<size_t>(layout.total_elems), 0.0f);
  const std::string prefix = o.prefix ? "transformer." : "";
  for (int64_t i = 0; i < static_cast<int64_t>(layout.tensors.size()); ++i) {
    const ParamTensor& t = layout.tensors[static_cast<size_t>(i)];
    const HfTensor h = hf_tensor(layout, i);
    std::vector<uint8_t> bytes;
    std::vector<float> values;  // HF's layout
    random_values(o.dtype, t.numel(), 100 + static_cast<uint64_t>(i), bytes, values);
    float* dst = fx.expected.data() + t.offset;
    if (h.transposed) {  // HF (in, out) of Strata's (out, in)
      const int64_t rows = t.shape.dims[0], cols = t.shape.dims[1];
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = values[c * rows + r];
      }
    } else {
      std::copy(values.begin(), values.end(), dst);
    }
    fx.tensors.push_back(make_tensor(prefix + h.name, o.dtype, h.shape, std::move(bytes)));
    if (o.buffers && m.arch == ModelArch::gpt2 &&
        h.name.find(".ln_1.weight") != std::string::npos) {
      const std::string layer = h.name.substr(0, h.name.find(".ln_1"));  // "h.3"
      const int64_t T = m.context_length;
      std::vector<float> mask(static_cast<size_t>(T * T));
      for (int64_t r = 0; r < T; ++r) {
        for (int64_t c = 0; c <= r; ++c) mask[r * T + c] = 1;
      }
      std::vector<uint8_t> mb(mask.size() * 4);
      std::memcpy(mb.data(), mask.data(), mb.size());
      fx.tensors.push_back(
          make_tensor(prefix + layer + ".attn.bias", StDType::f32, {1, 1, T, T}, mb));
      const float masked = -1e4f;
      std::vector<uint8_t> one(4);
      std::memcpy(one.data(), &masked, 4);
      fx.tensors.push_back(
          make_tensor(prefix + layer + ".attn.masked_bias", StDType::f32, {}, one));
    }
    if (o.buffers && m.arch == ModelArch::llama &&
        h.name.find(".input_layernorm.weight") != std::string::npos) {
      const std::string layer = h.name.substr(0, h.name.find(".input_layernorm"));
      std::vector<uint8_t> inv(static_cast<size_t>(m.head_size() / 2 * 4), 0);
      fx.tensors.push_back(make_tensor(layer + ".self_attn.rotary_emb.inv_freq", StDType::f32,
                                       {m.head_size() / 2}, inv));
    }
  }
  if (o.lm_head) {
    StTensor head = fx.tensors.front();  // the token embedding
    head.name = "lm_head.weight";
    fx.tensors.push_back(head);
  }
  if (o.edit) o.edit(fx.tensors);

  write_text(fx.dir + "/config.json", hf_config_json_for(m));
  const size_t n = fx.tensors.size(), shards = static_cast<size_t>(o.shards);
  json weight_map = json::object();
  for (size_t s = 0; s < shards; ++s) {
    SafeTensors st;
    st.metadata = {{"format", "pt"}};
    for (size_t i = s * n / shards; i < (s + 1) * n / shards; ++i) {
      const StTensor& t = fx.tensors[i];
      st.add(t.name, t.dtype, t.shape, t.data.data());
    }
    char file[64];
    std::snprintf(file, sizeof file, "model-%05zu-of-%05zu.safetensors", s + 1, shards);
    const std::string base = shards == 1 ? "model.safetensors" : file;
    for (const StTensor& t : st.tensors) weight_map[t.name] = base;
    fx.shards.push_back(fx.dir + "/" + base);
    EXPECT_TRUE(write_safetensors(fx.shards.back(), st).ok());
  }
  if (shards > 1) {
    write_text(fx.dir + "/model.safetensors.index.json",
               json({{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}).dump(2));
  }
  return fx;
}

TrainConfig trainer_config(const ModelConfig& m, const std::string& schedule,
                           const std::string& store) {
  TrainConfig c = test::tiny_offload_config(schedule, store);
  c.model = m;
  return c;
}

struct Imported {
  std::unique_ptr<Device> dev = create_cpu_device();
  std::unique_ptr<Trainer> trainer;
  HfImportStats stats;
  std::vector<float> params;  // read_params after the import
};

// The plan's weights in a fresh trainer of `c`.
std::unique_ptr<Imported> import_into(const HfImportPlan& plan, const TrainConfig& c,
                                      const HfImportOptions& o = {}) {
  auto out = std::make_unique<Imported>();
  auto t = create_trainer(*out->dev, c);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  if (!t.ok()) return nullptr;
  out->trainer = std::move(*t);
  Trainer& trainer = *out->trainer;
  auto st = import_hf_weights(
      plan, trainer.layout(),
      [&](int64_t slab, const SlabPieceFn& fill) { return trainer.write_slab_pieces(slab, fill); },
      o);
  EXPECT_TRUE(st.ok()) << st.status().to_string();
  if (!st.ok()) return nullptr;
  out->stats = *st;
  out->params.resize(static_cast<size_t>(trainer.layout().total_elems));
  EXPECT_TRUE(trainer.read_params(out->params.data()).ok());
  return out;
}

// Equal bit for bit, naming the first tensor that is not.
void expect_params(const std::vector<float>& got, const std::vector<float>& want,
                   const ParamLayout& layout) {
  ASSERT_EQ(got.size(), want.size());
  for (const ParamTensor& t : layout.tensors) {
    if (std::memcmp(got.data() + t.offset, want.data() + t.offset,
                    static_cast<size_t>(t.numel()) * 4) != 0) {
      for (int64_t k = 0; k < t.numel(); ++k) {
        ASSERT_EQ(bits_of(got[t.offset + k]), bits_of(want[t.offset + k]))
            << t.name << " element " << k << ": " << got[t.offset + k] << " vs "
            << want[t.offset + k];
      }
    }
  }
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << "padding is not zero";
}

// The moments are zero and no step was taken: the optimizer starts fresh.
void expect_fresh_optimizer(Trainer& trainer) {
  EXPECT_EQ(trainer.steps_done(), 0);
  EXPECT_EQ(trainer.adam_steps(), 0);
  const ParamLayout& layout = trainer.layout();
  for (size_t s = 0; s < layout.slabs.size(); ++s) {
    const size_t n = static_cast<size_t>(layout.slabs[s].numel);
    std::vector<float> w(n), m(n, 1.0f), v(n, 1.0f);
    ASSERT_TRUE(
        trainer.read_slab_state(static_cast<int64_t>(s), w.data(), m.data(), v.data()).ok());
    EXPECT_EQ(std::count(m.begin(), m.end(), 0.0f), static_cast<std::ptrdiff_t>(n));
    EXPECT_EQ(std::count(v.begin(), v.end(), 0.0f), static_cast<std::ptrdiff_t>(n));
  }
}

std::string dtype_dir(StDType t) {
  return t == StDType::f32 ? "f32" : t == StDType::bf16 ? "bf16" : "f16";
}

// ---- Imports ---------------------------------------------------------------------------------

TEST(hf_import, Gpt2EveryDtypeSingleAndSharded) {
  for (StDType dtype : {StDType::f32, StDType::bf16, StDType::f16}) {
    for (int shards : {1, 3}) {
      SCOPED_TRACE(dtype_dir(dtype) + " in " + std::to_string(shards) + " files");
      FixtureOptions o;
      o.dtype = dtype;
      o.shards = shards;
      const Fixture fx =
          write_fixture("gpt2_" + dtype_dir(dtype) + "_" + std::to_string(shards), gpt2_model(), o);
      auto plan = plan_hf_import(fx.dir);
      ASSERT_TRUE(plan.ok()) << plan.status().to_string();
      EXPECT_EQ(plan->files, fx.shards);
      EXPECT_EQ(plan->index.empty(), shards == 1);
      EXPECT_EQ(plan->dtypes, st_dtype_name(dtype));
      EXPECT_TRUE(plan->ignored.empty());
      expect_same_model(plan->model, gpt2_model());
      const TrainConfig c = trainer_config(plan->model, "in_memory", fx.dir);
      auto imp = import_into(*plan, c);
      ASSERT_NE(imp, nullptr);
      expect_params(imp->params, fx.expected, imp->trainer->layout());
      expect_fresh_optimizer(*imp->trainer);
      EXPECT_EQ(imp->stats.tensors, static_cast<int64_t>(imp->trainer->layout().tensors.size()));
      EXPECT_EQ(imp->stats.parameters, imp->trainer->layout().parameter_count);
      EXPECT_EQ(imp->stats.bytes_read, plan->data_bytes);
    }
  }
}

// GPT2LMHeadModel's names, the mask buffers and a tied lm_head: read past, as HF's loader does.
TEST(hf_import, Gpt2LmHeadModelNamesAndBuffers) {
  FixtureOptions o;
  o.dtype = StDType::bf16;
  o.shards = 2;
  o.prefix = o.buffers = o.lm_head = true;
  const Fixture fx = write_fixture("gpt2_lm_head_model", gpt2_model(), o);
  auto plan = plan_hf_import(fx.dir);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->ignored.size(), 5u);  // 2 layers x 2 buffers + lm_head.weight
  auto imp = import_into(*plan, trainer_config(plan->model, "in_memory", fx.dir));
  ASSERT_NE(imp, nullptr);
  expect_params(imp->params, fx.expected, imp->trainer->layout());
}

// Grouped-query Llama, untied (its head in the final slab) and tied, with its rotary buffers.
TEST(hf_import, Llama) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    FixtureOptions o;
    o.dtype = StDType::bf16;
    o.shards = 2;
    o.buffers = true;
    o.lm_head = tied;  // a tied model's copy, read past
    const ModelConfig m = llama_model(tied);
    const Fixture fx = write_fixture(tied ? "llama_tied" : "llama_untied", m, o);
    auto plan = plan_hf_import(fx.dir);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    expect_same_model(plan->model, m);
    EXPECT_EQ(plan->ignored.size(), tied ? 3u : 2u);
    auto imp = import_into(*plan, trainer_config(plan->model, "in_memory", fx.dir));
    ASSERT_NE(imp, nullptr);
    expect_params(imp->params, fx.expected, imp->trainer->layout());
    expect_fresh_optimizer(*imp->trainer);
  }
}

// Note [Slab pieces]: the vertical trainer with everything on storage hands over pieces that cut
// tensors: a vocabulary of 512 makes the embedding larger than a block, so it comes in
// block-sized chunks that cut wte, and the alpha split (no clipping) puts a part boundary inside
// a block's Conv1D weight, which the import then keeps converted. The same values. With a read
// chunk of a few elements, host memory is one chunk and at most two Conv1D weights: less than
// a block's slab.
TEST(hf_import, PiecesThatCutTensorsAndBoundedMemory) {
  FixtureOptions o;
  o.dtype = StDType::f16;
  ModelConfig m = gpt2_model();
  m.vocab_size = 512;
  const Fixture fx = write_fixture("gpt2_cut", m, o);
  auto plan = plan_hf_import(fx.dir);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const std::string store = test::make_temp_dir("hf_import/store");
  TrainConfig c = trainer_config(plan->model, "vertical", store);
  c.offload.params_on_host = c.offload.optim_on_host = c.offload.grads_on_host = 0;
  c.offload.embed_optim_on_host = false;
  c.optim.grad_clip = 0;
  c.optim.alpha = 0.5;
  HfImportOptions io;
  io.chunk_bytes = 99;  // 49 elements: chunks that end at odd places
  auto imp = import_into(*plan, c, io);
  ASSERT_NE(imp, nullptr);
  const ParamLayout& layout = imp->trainer->layout();
  ASSERT_GT(layout.slabs[0].numel, layout.slabs[1].numel) << "the embedding is not cut";
  expect_params(imp->params, fx.expected, layout);
  expect_fresh_optimizer(*imp->trainer);
  const int64_t C = m.n_embd, conv1d_bytes = 4 * C * C * 4;  // the largest, (4C, C)
  EXPECT_GT(imp->stats.buffer_bytes, conv1d_bytes) << "no piece cut a Conv1D weight";
  EXPECT_LE(imp->stats.buffer_bytes, 98 + 2 * conv1d_bytes);
  EXPECT_LT(imp->stats.buffer_bytes, layout.slabs[1].numel * 4);
}

// ---- Refusals ----------------------------------------------------------------------------------

// The plan of a fixture edited by `edit`, which must fail.
Status plan_error(const std::string& name, const FixtureOptions& o,
                  const std::function<void(Fixture&)>& after = nullptr,
                  const ModelConfig& m = gpt2_model()) {
  Fixture fx = write_fixture(name, m, o);
  if (after) after(fx);
  auto plan = plan_hf_import(fx.dir);
  EXPECT_FALSE(plan.ok()) << name << " was accepted";
  return plan.status();
}

std::function<void(std::vector<StTensor>&)> remove(const std::string& name) {
  return [name](std::vector<StTensor>& ts) {
    ts.erase(
        std::remove_if(ts.begin(), ts.end(), [&](const StTensor& t) { return t.name == name; }),
        ts.end());
  };
}

TEST(hf_import_refuses, TruncatedShard) {
  FixtureOptions o;
  o.shards = 3;
  std::string shard;
  const Status s = plan_error("truncated", o, [&](Fixture& fx) {
    shard = fx.shards[2];
    fs::resize_file(shard, fs::file_size(shard) - 100);
  });
  test::expect_error(s, ErrorCode::bad_format, {shard, "ln_f.bias", "outside the data section"});
}

TEST(hf_import_refuses, MissingTensor) {
  FixtureOptions o;
  o.edit = remove("h.1.mlp.c_fc.bias");
  const Status s = plan_error("missing", o);
  test::expect_error(s, ErrorCode::bad_format,
                     {"model.safetensors", "'h.1.mlp.c_fc.bias' is missing", "config.json"});
  o.shards = 2;  // sharded: the index is where it should have been listed
  test::expect_error(plan_error("missing_sharded", o), ErrorCode::bad_format,
                     {"model.safetensors.index.json", "'h.1.mlp.c_fc.bias' is missing"});
}

TEST(hf_import_refuses, WrongShape) {
  FixtureOptions o;
  o.edit = [](std::vector<StTensor>& ts) {
    for (StTensor& t : ts) {
      if (t.name == "h.0.attn.c_attn.weight") t.shape = {96, 32};  // Strata's, not HF's
    }
  };
  test::expect_error(plan_error("shape", o), ErrorCode::bad_format,
                     {"model.safetensors", "'h.0.attn.c_attn.weight'", "(96, 32)", "(32, 96)"});
}

TEST(hf_import_refuses, IntegerDtype) {
  FixtureOptions o;
  o.edit = [](std::vector<StTensor>& ts) {
    for (StTensor& t : ts) {
      if (t.name == "wpe.weight") t.dtype = StDType::i32;
    }
  };
  test::expect_error(plan_error("dtype", o), ErrorCode::bad_format,
                     {"model.safetensors", "'wpe.weight' is I32", "F32, BF16 or F16"});
}

TEST(hf_import_refuses, IndexNamingMissingFile) {
  FixtureOptions o;
  o.shards = 3;
  std::string gone;
  const Status s = plan_error("missing_shard", o, [&](Fixture& fx) {
    gone = fs::path(fx.shards[1]).filename().string();
    fs::remove(fx.shards[1]);
  });
  test::expect_error(s, ErrorCode::not_found, {"model.safetensors.index.json", gone});
}

TEST(hf_import_refuses, UnknownTensor) {
  FixtureOptions o;
  o.edit = [](std::vector<StTensor>& ts) {
    ts.push_back(make_tensor("h.0.attn.rotary.weight", StDType::f32, {2}, std::vector<uint8_t>(8)));
  };
  test::expect_error(plan_error("unknown", o), ErrorCode::bad_format,
                     {"model.safetensors", "'h.0.attn.rotary.weight'", "not a parameter", "gpt2"});
  // A buffer's name for a layer the model does not have is no buffer of it.
  o.edit = [](std::vector<StTensor>& ts) {
    ts.push_back(make_tensor("h.2.attn.masked_bias", StDType::f32, {}, std::vector<uint8_t>(4)));
  };
  test::expect_error(plan_error("unknown_layer", o), ErrorCode::bad_format,
                     {"'h.2.attn.masked_bias'", "not a parameter"});
  // Llama's buffers are not GPT-2's, nor an untied model's head a tied copy.
  o.edit = [](std::vector<StTensor>& ts) {
    ts.push_back(make_tensor("model.layers.0.self_attn.rotary_emb.inv_freq", StDType::f32, {2},
                             std::vector<uint8_t>(8)));
  };
  test::expect_error(plan_error("unknown_llama_buffer", o), ErrorCode::bad_format,
                     {"'model.layers.0.self_attn.rotary_emb.inv_freq'", "not a parameter"});
}

TEST(hf_import_refuses, TensorUnderTwoNames) {
  FixtureOptions o;
  o.edit = [](std::vector<StTensor>& ts) {
    StTensor copy = ts.front();
    copy.name = "transformer." + copy.name;
    ts.push_back(copy);
  };
  test::expect_error(plan_error("twice", o), ErrorCode::bad_format,
                     {"'transformer.wte.weight'", "also in", "'wte.weight'"});
}

TEST(hf_import_refuses, IndexDisagreeingWithShards) {
  FixtureOptions o;
  o.shards = 2;
  auto edit_index = [](const std::function<void(json&)>& f) {
    return [f](Fixture& fx) {
      const std::string path = fx.dir + "/model.safetensors.index.json";
      std::ifstream in(path);
      json index = json::parse(in);
      f(index["weight_map"]);
      write_text(path, index.dump());
    };
  };
  // A tensor the index puts in the other shard.
  test::expect_error(plan_error("index_wrong_shard", o, edit_index([](json& map) {
                                  map["wte.weight"] = "model-00002-of-00002.safetensors";
                                })),
                     ErrorCode::bad_format,
                     {"model-00001-of-00002.safetensors", "'wte.weight'", "weight_map"});
  // A tensor the index does not list.
  test::expect_error(
      plan_error("index_unlisted", o, edit_index([](json& map) { map.erase("ln_f.bias"); })),
      ErrorCode::bad_format, {"model-00002-of-00002.safetensors", "'ln_f.bias'", "weight_map"});
  // A shard name that leaves the directory.
  test::expect_error(plan_error("index_path", o, edit_index([](json& map) {
                                  map["ln_f.bias"] = "../model-00002-of-00002.safetensors";
                                })),
                     ErrorCode::bad_format, {"index.json", "'ln_f.bias'", "not a file name"});
}

TEST(hf_import_refuses, UnsupportedModelType) {
  const Status s = plan_error("qwen2", {}, [](Fixture& fx) {
    json j = json::parse(hf_config_json_for(llama_model(false)));
    j["model_type"] = "qwen2";
    write_text(fx.dir + "/config.json", j.dump());
  });
  test::expect_error(s, ErrorCode::bad_format, {"config.json", "\"qwen2\"", "gpt2 and llama"});
}

TEST(hf_import_refuses, NoWeightsOrNoDirectory) {
  const Status s =
      plan_error("no_weights", {}, [](Fixture& fx) { fs::remove(fx.dir + "/model.safetensors"); });
  test::expect_error(s, ErrorCode::not_found, {"model.safetensors.index.json", "neither"});
  test::expect_error(plan_hf_import(test::make_temp_dir("hf_import/none") + "/nope").status(),
                     ErrorCode::not_found, {"nope"});
  const Status c =
      plan_error("no_config", {}, [](Fixture& fx) { fs::remove(fx.dir + "/config.json"); });
  test::expect_error(c, ErrorCode::not_found, {"config.json"});
}

// ---- Import -> checkpoint -> export -> import ---------------------------------------------------

TEST(hf_import, ExportRoundTripIsBitIdentical) {
  for (StDType dtype : {StDType::f32, StDType::bf16}) {
    SCOPED_TRACE(dtype_dir(dtype));
    FixtureOptions o;
    o.dtype = dtype;
    o.shards = 2;
    o.prefix = true;
    const Fixture fx = write_fixture("round_trip_" + dtype_dir(dtype), gpt2_model(), o);
    auto plan = plan_hf_import(fx.dir);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    const TrainConfig c = trainer_config(plan->model, "in_memory", fx.dir);
    auto first = import_into(*plan, c);
    ASSERT_NE(first, nullptr);

    // A checkpoint at step 0 of the imported trainer, exported as `strata export` does.
    auto engine = create_configured_engine(c.io, fx.dir);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    CheckpointMeta meta;  // step 0
    meta.seed = c.seed;
    meta.schedule = "in_memory";
    auto saved = save_checkpoint(
        **engine, fx.dir + "/ckpt", c, meta,
        [&](int64_t slab, const SlabPieceFn& take) {
          return first->trainer->read_slab_pieces(slab, take);
        },
        0);
    ASSERT_TRUE(saved.ok()) << saved.status().to_string();
    auto export_plan = plan_hf_export(saved->dir);
    ASSERT_TRUE(export_plan.ok()) << export_plan.status().to_string();
    auto files = write_hf_export(*export_plan, fx.dir + "/export/", 0);
    ASSERT_TRUE(files.ok()) << files.status().to_string();

    auto again = plan_hf_import(fx.dir + "/export");
    ASSERT_TRUE(again.ok()) << again.status().to_string();
    expect_same_model(again->model, plan->model);
    auto second = import_into(*again, c);
    ASSERT_NE(second, nullptr);
    expect_params(second->params, first->params, second->trainer->layout());
    expect_params(second->params, fx.expected, second->trainer->layout());

    if (dtype == StDType::f32) {  // the export holds the original bytes, under HF's names
      auto exported = read_safetensors(files->weights.front());
      ASSERT_TRUE(exported.ok()) << exported.status().to_string();
      for (const StTensor& t : fx.tensors) {
        const StTensor* e = exported->find(t.name.substr(std::string("transformer.").size()));
        ASSERT_NE(e, nullptr) << t.name;
        EXPECT_EQ(e->shape, t.shape) << t.name;
        EXPECT_TRUE(e->data == t.data) << t.name;
      }
    }
  }
}

}  // namespace
}  // namespace strata
