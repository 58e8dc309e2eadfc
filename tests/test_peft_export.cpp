// Export of a LoRA checkpoint (Note [PEFT adapter export] in formats/peft_export.h, Note [Merged
// export] in formats/lora_merge.h):
//  - the PEFT adapter holds exactly the adapters and the modules_to_save tensors, under PEFT's
//    names and shapes, with the checkpoint's bytes; adapter_config.json has PEFT's fields;
//  - target_modules matches exactly the adapted modules by PEFT's suffix rule;
//  - the merged model is W + (alpha / r) B A, computed here from the values the checkpoint was
//    saved from (Strata's layout, transposed here for GPT-2), for a GPT-2 and a GQA Llama; every
//    untargeted tensor is byte-identical to the checkpoint's; no adapter is written;
//  - the merge holds one base matrix and its adapter beside the copy chunk;
//  - --merge without LoRA, --shard-size for an adapter and a bad adapter --out are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/config.h"
#include "formats/checkpoint.h"
#include "formats/hf_export.h"
#include "formats/peft_export.h"
#include "formats/safetensors.h"
#include "io/configured_engine.h"
#include "model/hf_names.h"
#include "model/layout.h"
#include "model/lora.h"
#include "test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// A tiny model with LoRA rank 2, alpha 6 (scale 3) on some modules, one tensor trained in full.
// GPT-2 adapts c_attn and attn.c_proj (not mlp.c_proj) and saves wte; the Llama has grouped-query
// attention (1 kv head of 2) and an untied head, adapts q, k, v and down and saves lm_head.
TrainConfig lora_config(const std::string& dir, ModelArch arch) {
  TrainConfig c = test::tiny_offload_config("in_memory", dir);
  c.model.n_layer = 2;
  c.lora.rank = 2;
  c.lora.alpha = 6;
  if (arch == ModelArch::gpt2) {
    c.lora.targets = {"c_attn", "attn.c_proj"};
    c.lora.modules_to_save = {"wte"};
  } else {
    c.model.arch = ModelArch::llama;
    c.model.n_kv_head = 1;
    c.model.ffn_hidden = 48;
    c.model.tie_embeddings = false;
    c.lora.targets = {"q_proj", "k_proj", "v_proj", "down_proj"};
    c.lora.modules_to_save = {"lm_head"};
  }
  EXPECT_TRUE(check_lora(c).ok()) << check_lora(c).to_string();
  return c;
}

// The value the checkpoint holds for parameter element `elem` (Strata's layout): small, varied,
// nonzero B included, so a wrong element, rank index or transpose changes the merge.
float pattern(int64_t elem) {
  const uint32_t h = static_cast<uint32_t>(elem) * 2654435761u;
  return static_cast<float>(h >> 8) / 16777216.0f - 0.5f;
}

std::string patterned_checkpoint(const std::string& name, const TrainConfig& c) {
  const std::string dir = test::make_temp_dir(name);
  auto engine = create_configured_engine(c.io, dir);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  const ParamLayout layout = make_param_layout(c.model, c.lora);
  SlabReader read = [&](int64_t slab, const SlabPieceFn& take) {
    const Slab& s = layout.slabs[static_cast<size_t>(slab)];
    std::vector<float> w(static_cast<size_t>(s.numel)), m(w.size()), v(w.size());  // (numel)
    for (int64_t i = 0; i < s.numel; ++i) w[i] = pattern(s.offset + i);
    return take({0, s.numel, w.data(), m.data(), v.data()});
  };
  CheckpointMeta meta;
  meta.step = meta.adam_steps = 3;
  meta.seed = c.seed;
  meta.schedule = "in_memory";
  auto saved = save_checkpoint(**engine, dir + "/ckpt", c, meta, read, 0);
  EXPECT_TRUE(saved.ok()) << saved.status().to_string();
  return saved.ok() ? saved->dir : "";
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

SafeTensors read_all(const std::string& path) {
  auto st = read_safetensors(path);
  EXPECT_TRUE(st.ok()) << st.status().to_string();
  return st.ok() ? *st : SafeTensors{};
}

TEST(PeftExport, AdapterHoldsTheAdaptersAndSavedTensorsUnderPeftNames) {
  struct Want {
    ModelArch arch;
    std::vector<std::pair<std::string, std::vector<int64_t>>> some;  // a few names and shapes
    size_t count;  // every adapter and saved tensor
  };
  const std::vector<Want> cases = {
      {ModelArch::gpt2,
       {{"base_model.model.transformer.h.0.attn.c_attn.lora_A.weight", {2, 32}},
        {"base_model.model.transformer.h.0.attn.c_attn.lora_B.weight", {96, 2}},
        {"base_model.model.transformer.h.1.attn.c_proj.lora_B.weight", {32, 2}},
        {"base_model.model.transformer.wte.weight", {64, 32}}},
       2 * 2 * 2 + 1},
      {ModelArch::llama,
       {{"base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight", {16, 2}},
        {"base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight", {2, 32}},
        {"base_model.model.model.layers.0.mlp.down_proj.lora_A.weight", {2, 48}},
        {"base_model.model.lm_head.weight", {64, 32}}},
       2 * 4 * 2 + 1},
  };
  for (const Want& want : cases) {
    SCOPED_TRACE(enum_name(want.arch));
    const std::string dir = test::make_temp_dir("peft_export_adapter");
    const TrainConfig c = lora_config(dir, want.arch);
    const std::string ckpt = patterned_checkpoint("peft_export_adapter_ckpt", c);
    auto plan = plan_hf_export(ckpt);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    ASSERT_TRUE(plan->lora());
    auto files = write_peft_adapter(*plan, dir + "/adapter");
    ASSERT_TRUE(files.ok()) << files.status().to_string();
    EXPECT_EQ(files->weights, dir + "/adapter/adapter_model.safetensors");
    EXPECT_EQ(test::files_in(dir + "/adapter"),
              (std::vector<std::string>{"adapter_config.json", "adapter_model.safetensors"}));

    const SafeTensors adapter = read_all(files->weights);
    const SafeTensors source = read_all(ckpt + "/model.safetensors");
    EXPECT_EQ(adapter.metadata.at("format"), "pt");
    EXPECT_EQ(adapter.tensors.size(), want.count);
    EXPECT_EQ(files->tensors, static_cast<int64_t>(want.count));
    for (const auto& [name, shape] : want.some) {
      const StTensor* t = adapter.find(name);
      ASSERT_NE(t, nullptr) << name;
      EXPECT_EQ(t->shape, shape) << name;
    }
    // Every tensor is F32, an adapter or the saved one, with the checkpoint's bytes; nothing of
    // the frozen base.
    for (const StTensor& t : adapter.tensors) {
      EXPECT_EQ(t.dtype, StDType::f32) << t.name;
      ASSERT_EQ(t.name.rfind("base_model.model.", 0), 0u) << t.name;
      const bool lora = t.name.find(".lora_") != std::string::npos;
      EXPECT_TRUE(lora || t.name.find("wte") != std::string::npos ||
                  t.name.find("lm_head") != std::string::npos)
          << t.name << " is a base tensor";
      std::string source_name = lora ? t.name : t.name.substr(std::strlen("base_model.model."));
      if (!lora && want.arch == ModelArch::gpt2) source_name = source_name.substr(12);
      const StTensor* s = source.find(source_name);
      ASSERT_NE(s, nullptr) << source_name;
      EXPECT_EQ(t.data, s->data) << t.name;
    }
  }
}

TEST(PeftExport, AdapterConfigHasPeftsFields) {
  for (ModelArch arch : {ModelArch::gpt2, ModelArch::llama}) {
    SCOPED_TRACE(enum_name(arch));
    const std::string dir = test::make_temp_dir("peft_export_config");
    auto plan =
        plan_hf_export(patterned_checkpoint("peft_export_config_ckpt", lora_config(dir, arch)));
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    auto files = write_peft_adapter(*plan, dir + "/adapter/");
    ASSERT_TRUE(files.ok()) << files.status().to_string();
    const nlohmann::json c = read_json(files->config);
    const bool gpt2 = arch == ModelArch::gpt2;
    const nlohmann::json want = {
        {"peft_type", "LORA"},
        {"task_type", "CAUSAL_LM"},
        {"r", 2},
        {"lora_alpha", 6},
        {"lora_dropout", 0.0},
        {"target_modules", gpt2 ? nlohmann::json{"c_attn", "attn.c_proj"}
                                : nlohmann::json{"q_proj", "k_proj", "v_proj", "down_proj"}},
        {"fan_in_fan_out", gpt2},
        {"modules_to_save", gpt2 ? nlohmann::json{"wte"} : nlohmann::json{"lm_head"}},
        {"bias", "none"},
        {"use_rslora", false},
        {"use_dora", false},
        {"init_lora_weights", true},
        {"base_model_name_or_path", ""}};
    EXPECT_EQ(c, want) << c.dump(2);
    EXPECT_TRUE(c.at("lora_alpha").is_number_integer());

    HfExportPlan other = *plan;  // a fractional alpha stays fractional; no saved module: null
    LoraConfig lora = plan->layout.lora;
    lora.alpha = 2.5f;
    lora.modules_to_save.clear();
    other.layout = make_param_layout(other.model, lora);
    const nlohmann::json c2 = nlohmann::json::parse(peft_adapter_config_json(other));
    EXPECT_EQ(c2.at("lora_alpha").get<double>(), 2.5);
    EXPECT_TRUE(c2.at("modules_to_save").is_null());
  }
}

// PEFT's rule: a module matches a target it equals or ends with after a '.'.
bool peft_matches(const std::string& path, const std::string& target) {
  return path == target || (path.size() > target.size() &&
                            path.compare(path.size() - target.size(), target.size(), target) == 0 &&
                            path[path.size() - target.size() - 1] == '.');
}

TEST(PeftExport, TargetModulesMatchExactlyTheAdaptedModules) {
  using Names = std::vector<std::string>;
  using On = std::array<bool, kLoraSlots>;
  EXPECT_EQ(peft_target_modules(ModelArch::gpt2, On{true, true, true, true}),
            (Names{"c_attn", "c_proj", "c_fc"}));
  EXPECT_EQ(peft_target_modules(ModelArch::gpt2, On{false, true, false, false}),
            (Names{"attn.c_proj"}));
  EXPECT_EQ(peft_target_modules(ModelArch::gpt2, On{true, false, false, true}),
            (Names{"c_attn", "mlp.c_proj"}));
  EXPECT_EQ(peft_target_modules(ModelArch::llama, On{true, false, true, false, false, false, true}),
            (Names{"q_proj", "v_proj", "down_proj"}));
  // Every subset of every architecture: the names select, in a whole model's module paths,
  // exactly the adapted ones.
  for (ModelArch arch : {ModelArch::gpt2, ModelArch::llama}) {
    const auto& mods = lora_modules(arch);
    const std::string layer = arch == ModelArch::gpt2 ? "transformer.h.3." : "model.layers.3.";
    for (unsigned mask = 1; mask < (1u << mods.size()); ++mask) {
      On on{};
      for (size_t s = 0; s < mods.size(); ++s) on[s] = (mask >> s) & 1u;
      const Names names = peft_target_modules(arch, on);
      for (size_t s = 0; s < mods.size(); ++s) {
        const std::string path = layer + mods[s].hf_path;
        bool any = false;
        for (const std::string& n : names) any = any || peft_matches(path, n);
        EXPECT_EQ(any, on[s]) << enum_name(arch) << " mask " << mask << ": " << path;
      }
    }
  }
}

// The merged value of base tensor w, from the values the checkpoint was saved from: W (out, in)
// in Strata's layout plus scale * B A, each sum over the rank in double and rounded once, put in
// Hugging Face's layout (transposed for GPT-2's Conv1D).
std::vector<float> expected_merge(const ParamLayout& layout, const ParamTensor& w,
                                  const ParamTensor& a, const ParamTensor& b) {
  const int64_t out = w.shape.dims[0], in = w.shape.dims[1], r = a.shape.dims[0];
  const double scale = static_cast<double>(layout.lora.alpha) / static_cast<double>(r);
  std::vector<float> hf(static_cast<size_t>(out * in));  // HF's (out, in) or (in, out)
  for (int64_t i = 0; i < out; ++i) {
    for (int64_t j = 0; j < in; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < r; ++k) {
        sum += static_cast<double>(pattern(b.offset + i * r + k)) *
               static_cast<double>(pattern(a.offset + k * in + j));
      }
      const double base = pattern(w.offset + i * in + j);
      hf[static_cast<size_t>(w.hf_transposed ? j * out + i : i * in + j)] =
          static_cast<float>(base + scale * sum);
    }
  }
  return hf;
}

// HF name of a targeted weight -> its adapter (A, B), found by the adapters' names here
// ("blk.3.attn.c_attn.lora_A" adapts h.3.attn.c_attn.weight / model.layers.3.<path>.weight).
std::map<std::string, std::pair<const ParamTensor*, const ParamTensor*>> adapters_by_base(
    const ParamLayout& layout) {
  std::map<std::string, std::pair<const ParamTensor*, const ParamTensor*>> out;
  const std::string prefix = layout.config.arch == ModelArch::gpt2 ? "h." : "model.layers.";
  for (const ParamTensor& a : layout.tensors) {
    const std::string suffix = ".lora_A";
    if (a.name.size() < suffix.size() ||
        a.name.compare(a.name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const std::string module = a.name.substr(4, a.name.size() - 4 - suffix.size());
    const int64_t b = layout.find(a.name.substr(0, a.name.size() - 1) + "B");
    EXPECT_GE(b, 0) << a.name;
    out[prefix + module + ".weight"] = {&a, &layout.tensors[static_cast<size_t>(b)]};
  }
  return out;
}

TEST(PeftExport, MergedIsBasePlusScaledBAAndTheRestIsByteIdentical) {
  for (ModelArch arch : {ModelArch::gpt2, ModelArch::llama}) {
    SCOPED_TRACE(enum_name(arch));
    const std::string dir = test::make_temp_dir("peft_export_merged");
    const TrainConfig c = lora_config(dir, arch);
    const std::string ckpt = patterned_checkpoint("peft_export_merged_ckpt", c);
    auto plan = plan_hf_export(ckpt);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    auto files = write_hf_export(*plan, dir + "/merged/", 0);
    ASSERT_TRUE(files.ok()) << files.status().to_string();
    ASSERT_EQ(files->weights, std::vector<std::string>{dir + "/merged/model.safetensors"});
    EXPECT_TRUE(fs::exists(dir + "/merged/config.json"));

    const ParamLayout layout = make_param_layout(c.model, c.lora);
    const auto adapters = adapters_by_base(layout);
    EXPECT_EQ(adapters.size(), arch == ModelArch::gpt2 ? 2u * 2 : 2u * 4);
    const SafeTensors merged = read_all(files->weights.front());
    const SafeTensors source = read_all(ckpt + "/model.safetensors");
    std::set<std::string> want_names, got_names;
    for (const StTensor& t : merged.tensors) got_names.insert(t.name);
    size_t checked = 0;
    for (int64_t i = 0; i < static_cast<int64_t>(layout.tensors.size()); ++i) {
      const ParamTensor& t = layout.tensors[static_cast<size_t>(i)];
      if (t.lora_slot >= 0) continue;
      want_names.insert(t.hf_name);
      const StTensor* m = merged.find(t.hf_name);
      ASSERT_NE(m, nullptr) << t.hf_name;
      EXPECT_EQ(m->shape, hf_tensor(layout, i).shape) << t.hf_name;
      const StTensor* s = source.find(t.hf_name);
      ASSERT_NE(s, nullptr) << t.hf_name;
      auto it = adapters.find(t.hf_name);
      if (it == adapters.end()) {
        EXPECT_EQ(m->data, s->data) << t.hf_name << " is not targeted: the base's bytes";
        continue;
      }
      const std::vector<float> want =
          expected_merge(layout, t, *it->second.first, *it->second.second);
      auto got = merged.get_f32(t.hf_name);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      test::expect_same_bits(*got, want, t.hf_name.c_str());
      EXPECT_NE(m->data, s->data) << t.hf_name << ": the adapter changed nothing";
      ++checked;
    }
    EXPECT_EQ(checked, adapters.size());
    EXPECT_EQ(got_names, want_names) << "the merged model holds the base's tensors only";

    // Sharded, the same tensors and bytes.
    auto sharded = write_hf_export(*plan, dir + "/sharded/", 6000);
    ASSERT_TRUE(sharded.ok()) << sharded.status().to_string();
    ASSERT_GT(sharded->weights.size(), 2u);
    size_t seen = 0;
    for (const std::string& path : sharded->weights) {
      for (const StTensor& t : read_all(path).tensors) {
        const StTensor* whole = merged.find(t.name);
        ASSERT_NE(whole, nullptr) << t.name;
        EXPECT_EQ(t.data, whole->data) << t.name;
        ++seen;
      }
    }
    EXPECT_EQ(seen, merged.tensors.size());
  }
}

// Host memory while merging: the copy chunk, one base matrix and its adapter.
TEST(PeftExport, MergeHoldsOneMatrixAndItsAdapter) {
  const std::string dir = test::make_temp_dir("peft_export_memory");
  const TrainConfig c = lora_config(dir, ModelArch::llama);
  constexpr int64_t kChunk = 1000;
  CheckpointReadStats stats;
  CheckpointReadOptions options;
  options.chunk_bytes = kChunk;
  options.stats = &stats;
  auto plan = plan_hf_export(patterned_checkpoint("peft_export_memory_ckpt", c), options);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  auto files = write_hf_export(*plan, dir + "/merged/", 0, options);
  ASSERT_TRUE(files.ok()) << files.status().to_string();
  int64_t largest = 0;  // one base matrix and its A and B, in bytes
  for (const auto& [name, ab] : adapters_by_base(plan->layout)) {
    const int64_t r = ab.first->shape.dims[0], in = ab.first->shape.dims[1];
    const int64_t out = ab.second->shape.dims[0];
    largest = std::max<int64_t>(largest, 4 * (out * in + r * (in + out)));
  }
  EXPECT_LE(stats.buffer_bytes, kChunk + largest);
  EXPECT_GT(stats.buffer_bytes, kChunk) << "the merge buffers were not counted";
}

TEST(PeftExport, RefusesMergeWithoutLoraAndBadAdapterOutputs) {
  const std::string dir = test::make_temp_dir("peft_export_refused");
  const TrainConfig lora = lora_config(dir, ModelArch::gpt2);
  TrainConfig full = lora;
  full.lora = LoraConfig{};

  EXPECT_EQ(*choose_export(full, "ck", false, false), ExportKind::model);
  EXPECT_EQ(*choose_export(full, "ck", false, true), ExportKind::model);
  EXPECT_EQ(*choose_export(lora, "ck", false, false), ExportKind::adapter);
  EXPECT_EQ(*choose_export(lora, "ck", true, true), ExportKind::merged);
  auto merge = choose_export(full, "ck/step-00000003", true, false);
  test::expect_error(merge.status(), ErrorCode::invalid_argument,
                     {"--merge", "ck/step-00000003", "no LoRA adapters"});
  test::expect_error(choose_export(lora, "ck", false, true).status(), ErrorCode::invalid_argument,
                     {"--shard-size", "PEFT adapter"});

  auto full_plan = plan_hf_export(patterned_checkpoint("peft_export_refused_full", full));
  ASSERT_TRUE(full_plan.ok()) << full_plan.status().to_string();
  EXPECT_FALSE(full_plan->lora());
  test::expect_error(write_peft_adapter(*full_plan, dir + "/a").status(),
                     ErrorCode::invalid_argument, {"no LoRA adapters"});

  const std::string ckpt = patterned_checkpoint("peft_export_refused_lora", lora);
  auto plan = plan_hf_export(ckpt);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  test::expect_error(write_peft_adapter(*plan, dir + "/adapter.safetensors").status(),
                     ErrorCode::invalid_argument, {"adapter.safetensors", "is a directory"});
  test::expect_error(write_peft_adapter(*plan, ckpt).status(), ErrorCode::invalid_argument,
                     {"inside the checkpoint"});
  // A link where the config goes: refused before the weights are written.
  fs::create_directories(dir + "/linked");
  std::ofstream(dir + "/target.json") << "not ours";
  fs::create_symlink(dir + "/target.json", dir + "/linked/adapter_config.json");
  test::expect_error(write_peft_adapter(*plan, dir + "/linked").status(),
                     ErrorCode::invalid_argument, {"adapter_config.json"});
  EXPECT_FALSE(fs::exists(dir + "/linked/adapter_model.safetensors"));
  EXPECT_FALSE(fs::exists(dir + "/adapter.safetensors"));
}

}  // namespace
}  // namespace strata
