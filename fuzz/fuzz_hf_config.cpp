// A Hugging Face model directory through plan_hf_import (Note [Hugging Face import]). The input
// is split at NUL bytes (which JSON text never holds):
//   config.json \0 model.safetensors.index.json \0 model.safetensors
// each part written to the scratch directory when present and removed when not (no NUL: only a
// config.json). Beside them lie four shards written at start, of two tiny models whose configs
// the seeds spell out: gpt2-1/gpt2-2.safetensors (GPT-2, vocab 8, context 4, 1 layer, 1 head,
// width 4) and llama-1/llama-2.safetensors (Llama, vocab 8, context 4, 1 layer, 2 heads, 1 KV
// head, width 4, ffn 8, untied); shard 2 holds the layers' tensors, shard 1 the rest. A plan that
// succeeds must cover the layout, lie inside its files, and its model must survive
// hf_config_json_for and model_config_from_hf unchanged (Note [Hugging Face configs]).
// STRATA_FUZZ_VERBOSE=1 prints each input's verdict (for writing seeds).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "formats/hf_import.h"
#include "fuzz_scratch.h"
#include "model/hf_config.h"
#include "model/hf_names.h"

namespace {

namespace fs = std::filesystem;
using strata::ModelConfig;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "hf_config: %s\n", what.c_str());
  std::abort();
}

ModelConfig tiny_gpt2() {
  ModelConfig m;
  m.vocab_size = 8;
  m.context_length = 4;
  m.n_layer = 1;
  m.n_head = 1;
  m.n_embd = 4;
  return m;
}

ModelConfig tiny_llama() {
  ModelConfig m;
  m.arch = strata::ModelArch::llama;
  m.vocab_size = 8;
  m.context_length = 4;
  m.n_layer = 1;
  m.n_head = 2;
  m.n_kv_head = 1;
  m.n_embd = 4;
  m.ffn_hidden = 8;
  m.tie_embeddings = false;
  return m;
}

// The model's tensors under their HF names, zero, in two shards: <stem>-1 and <stem>-2.
void write_shards(const ModelConfig& m, const std::string& stem) {
  const strata::ParamLayout layout = strata::make_param_layout(m);
  strata::SafeTensors shards[2];
  for (int64_t i = 0; i < static_cast<int64_t>(layout.tensors.size()); ++i) {
    const strata::HfTensor h = strata::hf_tensor(layout, i);
    const bool layer = h.name.rfind("h.", 0) == 0 || h.name.find(".layers.") != std::string::npos;
    int64_t numel = 1;
    for (int64_t d : h.shape) numel *= d;
    const std::vector<float> zeros(static_cast<size_t>(numel), 0.0f);
    shards[layer ? 1 : 0].add_f32(h.name, h.shape, zeros.data());
  }
  for (int s = 0; s < 2; ++s) {
    const std::string path =
        strata::fuzz::scratch_dir() + "/" + stem + "-" + std::to_string(s + 1) + ".safetensors";
    if (!strata::write_safetensors(path, shards[s]).ok()) fail("cannot write " + path);
  }
}

// Writes `part` as scratch_dir()/name, or removes that file when the part is absent.
void place(const std::string& name, const std::string_view* part) {
  if (part != nullptr) {
    strata::fuzz::write_scratch(name, reinterpret_cast<const uint8_t*>(part->data()), part->size());
    return;
  }
  std::error_code ec;
  fs::remove(strata::fuzz::scratch_dir() + "/" + name, ec);
}

void check_plan(const strata::HfImportPlan& plan) {
  const strata::ParamLayout layout = strata::make_param_layout(plan.model);
  if (plan.tensors.size() != layout.tensors.size()) fail("the plan does not cover the layout");
  for (const std::string& f : plan.files) {
    if (fs::path(f).parent_path() != fs::path(plan.dir)) fail("a weight file outside the dir");
  }
  for (const strata::HfImportSource& src : plan.tensors) {
    if (src.file >= plan.files.size()) fail("a tensor in no file");
    std::error_code ec;
    const auto bytes = static_cast<int64_t>(fs::file_size(plan.files[src.file], ec));
    if (ec || src.entry.offset < 8 || src.entry.bytes < 0 ||
        src.entry.offset > bytes - src.entry.bytes) {
      fail("tensor '" + src.entry.name + "' lies outside " + plan.files[src.file]);
    }
  }
  const auto j = nlohmann::json::parse(strata::hf_config_json_for(plan.model));
  auto again = strata::model_config_from_hf(j, "fuzz/config.json");
  if (!again.ok()) fail("the plan's model does not read back: " + again.status().message());
  if (auto d = strata::model_difference(*again, plan.model)) {
    fail("the plan's model reads back with another " + d->key + ": " + d->a + " vs " + d->b);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  write_shards(tiny_gpt2(), "gpt2");
  write_shards(tiny_llama(), "llama");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  for (size_t at = 0;;) {
    const size_t nul = parts.size() < 2 ? input.find('\0', at) : std::string_view::npos;
    parts.push_back(input.substr(at, nul == std::string_view::npos ? nul : nul - at));
    if (nul == std::string_view::npos) break;
    at = nul + 1;
  }
  place("config.json", &parts[0]);
  place("model.safetensors.index.json", parts.size() > 1 ? &parts[1] : nullptr);
  place("model.safetensors", parts.size() > 2 ? &parts[2] : nullptr);

  auto plan = strata::plan_hf_import(strata::fuzz::scratch_dir());
  if (std::getenv("STRATA_FUZZ_VERBOSE") != nullptr) {
    std::fprintf(stderr, "plan: %s\n",
                 plan.ok() ? ("ok, " + std::to_string(plan->tensors.size()) + " tensors").c_str()
                           : plan.status().message().c_str());
  }
  if (plan.ok()) check_plan(*plan);
  return 0;
}
