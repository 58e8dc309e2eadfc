// Streaming Hugging Face export; Note [Streaming export] in hf_export.h.
#include "formats/hf_export.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "core/check.h"
#include "core/file_util.h"
#include "core/output_file.h"
#include "formats/lora_merge.h"
#include "model/hf_config.h"
#include "model/hf_names.h"
#include "model/layout.h"

namespace strata {

namespace {

namespace fs = std::filesystem;

// The checkpoint's model file checked against the parameter table of its config: every HF
// tensor present, F32, with HF's shape, and nothing else (an extra tensor means the config and
// the weights disagree about the model). Returns the entries in layout order.
Result<std::vector<StEntry>> hf_tensors_of(const SafeTensorsHeader& st, const ParamLayout& layout,
                                           const std::string& config_path) {
  std::map<std::string, const StEntry*> by_name;
  for (const StEntry& e : st.tensors) by_name[e.name] = &e;
  std::vector<StEntry> out;
  out.reserve(layout.tensors.size());
  for (int64_t i = 0; i < static_cast<int64_t>(layout.tensors.size()); ++i) {
    const HfTensor h = hf_tensor(layout, i);
    auto it = by_name.find(h.name);
    if (it == by_name.end()) {
      return bad_format(st.path + ": tensor '" + h.name + "' is missing (the model of " +
                        config_path + " has it)");
    }
    const StEntry& e = *it->second;
    if (e.dtype != StDType::f32) {
      return bad_format(st.path + ": tensor '" + h.name + "' is " + st_dtype_name(e.dtype) +
                        ", expected F32");
    }
    if (e.shape != h.shape) {
      return bad_format(st.path + ": tensor '" + h.name + "' has shape " + shape_text(e.shape) +
                        ", expected " + shape_text(h.shape) + " for the model of " + config_path);
    }
    out.push_back(e);
    by_name.erase(it);
  }
  if (!by_name.empty()) {
    return bad_format(st.path + ": tensor '" + by_name.begin()->first +
                      "' is not a parameter of the model of " + config_path);
  }
  return out;
}

// Where the files of an export go (Note [Streaming export]).
struct ExportTarget {
  fs::path dir;
  std::string single;  // the unsharded file's name
  std::string base;    // shards are base-00001-of-0000N.safetensors

  std::string shard(size_t i, size_t n) const {
    char buf[64];
    std::snprintf(buf, sizeof buf, "-%05zu-of-%05zu.safetensors", i + 1, n);
    return base + buf;
  }
  std::string index() const { return base + ".safetensors.index.json"; }
  // A name that some export to this target could have written as a shard.
  bool is_shard_name(const std::string& name) const {
    const std::string prefix = base + "-", suffix = ".safetensors";
    if (name.size() != prefix.size() + 14 + suffix.size() || name.rfind(prefix, 0) != 0 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      return false;
    }
    const std::string middle = name.substr(prefix.size(), 14);  // 00001-of-00003
    for (size_t i : {0, 1, 2, 3, 4, 9, 10, 11, 12, 13}) {
      if (!std::isdigit(static_cast<unsigned char>(middle[i]))) return false;
    }
    return middle.compare(5, 4, "-of-") == 0;
  }
};

ExportTarget export_target(const std::string& out) {
  std::error_code ec;
  if (out.back() == '/' || fs::is_directory(out, ec)) {
    return {fs::path(out), "model.safetensors", "model"};
  }
  const fs::path p(out);
  const std::string name = p.filename().string(), suffix = ".safetensors";
  const bool has_suffix = name.size() > suffix.size() &&
                          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  return {p.parent_path().empty() ? fs::path(".") : p.parent_path(), name,
          has_suffix ? name.substr(0, name.size() - suffix.size()) : name};
}

// The bytes of the export's tensors, appended to a writer: copied through one chunk, or a LoRA
// checkpoint's targeted weight merged (Note [Merged export]).
struct ExportSource {
  const ReadOnlyFile& src;
  const HfExportPlan& plan;
  std::vector<LoraMergeSource> merges;  // by layout index
  std::vector<uint8_t> chunk;
  CheckpointReadStats* stats = nullptr;

  // Host memory: the chunk, and while merging one base matrix and its adapter, (out * in +
  // r * (in + out)) f32, freed before the next tensor.
  Status append(SafeTensorsWriter& w, size_t index) {
    const StEntry& e = plan.tensors[index];
    if (!merges[index].merges()) return append_copy(w, src, e, chunk);
    LoraMergeBuffers merged;
    STRATA_RETURN_IF_ERROR(read_merged_tensor(src, plan.tensors, plan.layout,
                                              static_cast<int64_t>(index), merges[index], merged));
    if (stats != nullptr) {
      stats->note_buffers(static_cast<int64_t>(chunk.size()) + merged.bytes());
    }
    return w.append(merged.w.data(), e.bytes);
  }

  static Status append_copy(SafeTensorsWriter& w, const ReadOnlyFile& src, const StEntry& e,
                            std::vector<uint8_t>& chunk) {
    for (int64_t done = 0; done < e.bytes;) {
      const int64_t n = std::min<int64_t>(static_cast<int64_t>(chunk.size()), e.bytes - done);
      STRATA_RETURN_IF_ERROR(src.read_at(chunk.data(), n, e.offset + done));
      STRATA_RETURN_IF_ERROR(w.append(chunk.data(), n));
      done += n;
    }
    return Status();
  }
};

// transformers' loader refuses safetensors files without format "pt" in the metadata.
Result<SafeTensorsWriter> hf_weights_writer(const std::string& path,
                                            const std::vector<StEntry>& entries) {
  return SafeTensorsWriter::create(path, entries, {{"format", "pt"}});
}

// The plan's tensors `which` (indices into plan.tensors), in order, as a new safetensors file at
// `path`.
Status write_weights_file(ExportSource& source, const std::vector<size_t>& which,
                          const std::string& path) {
  std::vector<StEntry> entries;
  for (size_t i : which) entries.push_back(source.plan.tensors[i]);
  STRATA_ASSIGN_OR_RETURN(SafeTensorsWriter w, hf_weights_writer(path, entries));
  for (size_t i : which) STRATA_RETURN_IF_ERROR(source.append(w, i));
  return w.finish();
}

// HF's index of a sharded export: total data bytes and the shard of every tensor.
std::string shard_index_json(const std::vector<StEntry>& tensors,
                             const std::vector<std::vector<size_t>>& shards,
                             const ExportTarget& target) {
  nlohmann::json weight_map = nlohmann::json::object();
  int64_t total = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    for (size_t i : shards[s]) {
      weight_map[tensors[i].name] = target.shard(s, shards.size());
      total += tensors[i].bytes;
    }
  }
  const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  return index.dump(2) + "\n";
}

// Files of the other layout under this target's names, which a loader could take for the new
// export (Note [Streaming export]), removed; returns their paths.
Result<std::vector<std::string>> remove_stale(const ExportTarget& target,
                                              const std::set<std::string>& written, bool sharded) {
  std::vector<fs::path> stale;  // listed first: removing while listing may skip entries
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(target.dir, ec)) {
    const std::string name = e.path().filename().string();
    if (written.count(name) != 0) continue;
    if ((sharded && name == target.single) || (!sharded && name == target.index()) ||
        target.is_shard_name(name)) {
      stale.push_back(e.path());
    }
  }
  if (ec) return io_error("cannot list " + target.dir.string() + ": " + ec.message());
  std::vector<std::string> removed;
  for (const fs::path& p : stale) {
    fs::remove(p, ec);
    if (ec) return io_error("cannot remove stale export file " + p.string() + ": " + ec.message());
    removed.push_back(p.string());
  }
  return removed;
}

}  // namespace

Status prepare_export_dir(const std::string& dir, const std::string& out,
                          const std::string& checkpoint) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return invalid_argument(dir + ": cannot create directory: " + ec.message());
  if (fs::equivalent(dir, checkpoint, ec)) {
    return invalid_argument("--out " + out + " is inside the checkpoint " + checkpoint +
                            "; export to another directory");
  }
  return Status();
}

Status write_copied_tensors(const ReadOnlyFile& src, const std::vector<StEntry>& entries,
                            const std::string& path, std::vector<uint8_t>& chunk) {
  STRATA_ASSIGN_OR_RETURN(SafeTensorsWriter w, hf_weights_writer(path, entries));
  for (const StEntry& e : entries) {
    STRATA_RETURN_IF_ERROR(ExportSource::append_copy(w, src, e, chunk));
  }
  return w.finish();
}

Status check_hf_export_out(const std::string& out) {
  if (out.empty()) return invalid_argument("--out is empty");
  const ExportTarget target = export_target(out);
  STRATA_RETURN_IF_ERROR(check_output_dir(target.dir.string(), "export directory"));
  for (const std::string& name :
       {target.single, target.index(), std::string("config.json"),
        std::string("generation_config.json"), std::string("tokenizer.json"),
        std::string("tokenizer.model"), std::string("tokenizer_config.json"),
        std::string("special_tokens_map.json")}) {
    STRATA_RETURN_IF_ERROR(check_output_path((target.dir / name).string(), "export file"));
  }
  return Status::ok_status();
}

Result<HfExportPlan> plan_hf_export(const std::string& checkpoint_dir,
                                    const CheckpointReadOptions& options) {
  // The weights and the config come from bytes the manifest vouched for, so a torn or corrupted
  // checkpoint is refused here rather than exported as plausible-looking weights. The optimizer
  // state, twice the weights, is not read.
  STRATA_RETURN_IF_ERROR(verify_checkpoint_files(
      checkpoint_dir, {"config.json", "model.safetensors", "trainer_state.json"}, options));
  STRATA_ASSIGN_OR_RETURN(SafeTensorsHeader header,
                          read_safetensors_header(checkpoint_dir + "/model.safetensors"));
  const std::string config_path = (fs::path(checkpoint_dir) / "config.json").string();
  STRATA_ASSIGN_OR_RETURN(nlohmann::json json, read_json_file(config_path));
  auto cfg = parse_config(json);
  if (!cfg.ok()) return bad_format(config_path + ": " + cfg.status().message());
  const ParamLayout layout = make_param_layout(cfg->model, cfg->lora);

  HfExportPlan plan;
  plan.checkpoint = checkpoint_dir;
  plan.model = cfg->model;
  plan.layout = layout;
  plan.weights_path = header.path;
  STRATA_ASSIGN_OR_RETURN(plan.tensors, hf_tensors_of(header, layout, config_path));
  plan.parameter_count = layout.parameter_count;
  STRATA_ASSIGN_OR_RETURN(const CheckpointMeta meta, read_trainer_state(checkpoint_dir));
  plan.base_model = meta.base_model;
  // Note [Checkpoint tokenizer]: its own copy, vouched for by the manifest, else the base's.
  plan.tokenizer_files = tokenizer_files_in(checkpoint_dir);
  plan.tokenizer_copied = !plan.tokenizer_files.empty();
  if (plan.tokenizer_copied) {
    std::vector<std::string> names;
    for (const std::string& f : plan.tokenizer_files) names.push_back(fs::path(f).filename());
    STRATA_RETURN_IF_ERROR(verify_checkpoint_files(checkpoint_dir, names, options));
  } else {
    plan.tokenizer_files = base_tokenizer_files(plan.base_model);
  }
  return plan;
}

nlohmann::json hf_export_config(const HfExportPlan& plan) {
  nlohmann::json ours = nlohmann::json::parse(hf_config_json_for(plan.model));
  if (plan.base_model.is_null()) return ours;
  static const std::set<std::string> kImported = {"torch_dtype", "attention_dropout",
                                                  "resid_pdrop", "embd_pdrop",
                                                  "attn_pdrop",  "initializer_range"};
  nlohmann::json merged = plan.base_model["config"];
  for (const auto& [key, value] : ours.items()) {
    if (!kImported.count(key) || !merged.contains(key)) merged[key] = value;
  }
  return merged;
}

std::vector<std::string> base_tokenizer_files(const nlohmann::json& base_model) {
  if (base_model.is_null()) return {};
  return tokenizer_files_in(base_model["path"].get<std::string>());
}

std::string tokenizer_dir_of(const std::vector<std::string>& files) {
  for (const std::string& f : files) {
    const fs::path p = f;
    if (p.filename() == "tokenizer.json" || p.filename() == "tokenizer.model") {
      return p.parent_path().string();
    }
  }
  return "";
}

nlohmann::json hf_export_generation_config(const HfExportPlan& plan, const nlohmann::json& config) {
  if (!plan.base_model.is_null() && plan.base_model.contains("generation_config")) {
    return plan.base_model["generation_config"];
  }
  nlohmann::json g = {{"_from_model_config", true}};
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
    if (config.contains(key) && !config[key].is_null()) g[key] = config[key];
  }
  return g.size() > 1 ? g : nlohmann::json();
}

std::vector<std::vector<size_t>> group_into_shards(const std::vector<int64_t>& tensor_bytes,
                                                   int64_t shard_bytes) {
  std::vector<std::vector<size_t>> shards;
  int64_t filled = 0;
  for (size_t i = 0; i < tensor_bytes.size(); ++i) {
    const bool fits = shard_bytes <= 0 || filled + tensor_bytes[i] <= shard_bytes;
    if (shards.empty() || (!fits && !shards.back().empty())) {
      shards.emplace_back();
      filled = 0;
    }
    shards.back().push_back(i);
    filled += tensor_bytes[i];
  }
  if (shards.empty()) shards.emplace_back();
  return shards;
}

Result<HfExportFiles> write_hf_export(const HfExportPlan& plan, const std::string& out,
                                      int64_t shard_bytes, const CheckpointReadOptions& options) {
  STRATA_RETURN_IF_ERROR(check_hf_export_out(out));
  if (options.chunk_bytes <= 0) {
    return invalid_argument("export copy chunk of " + std::to_string(options.chunk_bytes) +
                            " bytes; it must be positive");
  }
  STRATA_CHECK_MSG(plan.layout.tensors.size() == plan.tensors.size(),
                   "an export plan's tensors and layout disagree: make it with plan_hf_export");
  const ExportTarget target = export_target(out);
  STRATA_RETURN_IF_ERROR(prepare_export_dir(target.dir.string(), out, plan.checkpoint));

  // The model's tensors, in layout order: all of a full checkpoint's, a LoRA checkpoint's base
  // (Note [Merged export]).
  HfExportFiles files;
  std::vector<size_t> model;  // indices into plan.tensors
  std::vector<int64_t> bytes;
  int64_t largest = 1;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    largest = std::max(largest, plan.tensors[i].bytes);
    if (plan.layout.tensors[i].lora_slot >= 0) continue;
    model.push_back(i);
    bytes.push_back(plan.tensors[i].bytes);
    files.parameters += plan.tensors[i].numel();
  }
  files.tensors = static_cast<int64_t>(model.size());
  std::vector<std::vector<size_t>> shards = group_into_shards(bytes, shard_bytes);
  for (auto& shard : shards) {
    for (size_t& i : shard) i = model[i];
  }
  const bool sharded = shards.size() > 1;

  STRATA_ASSIGN_OR_RETURN(ReadOnlyFile src,
                          ReadOnlyFile::open(plan.weights_path, "checkpoint file"));
  if (options.stats != nullptr) src.count_reads_in(&options.stats->reads);
  ExportSource source{src, plan, lora_merge_sources(plan.layout), {}, options.stats};
  source.chunk.resize(static_cast<size_t>(std::min(options.chunk_bytes, largest)));
  if (options.stats != nullptr) {
    options.stats->note_buffers(static_cast<int64_t>(source.chunk.size()));
  }

  std::set<std::string> written;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name = sharded ? target.shard(s, shards.size()) : target.single;
    const std::string path = (target.dir / name).string();
    STRATA_RETURN_IF_ERROR(write_weights_file(source, shards[s], path));
    files.weights.push_back(path);
    written.insert(name);
  }
  if (sharded) {
    files.index = (target.dir / target.index()).string();
    STRATA_RETURN_IF_ERROR(write_output_file(
        files.index, shard_index_json(plan.tensors, shards, target), "shard index"));
    written.insert(target.index());
  }
  files.config = (target.dir / "config.json").string();
  const nlohmann::json config = hf_export_config(plan);
  STRATA_RETURN_IF_ERROR(write_output_file(files.config, config.dump(2) + "\n", "config"));
  if (const nlohmann::json g = hf_export_generation_config(plan, config); !g.is_null()) {
    files.generation_config = (target.dir / "generation_config.json").string();
    STRATA_RETURN_IF_ERROR(
        write_output_file(files.generation_config, g.dump(2) + "\n", "generation config"));
  }
  for (const std::string& from : plan.tokenizer_files) {
    STRATA_ASSIGN_OR_RETURN(const std::string bytes, read_whole_file(from, "tokenizer file"));
    const std::string to = (target.dir / fs::path(from).filename()).string();
    STRATA_RETURN_IF_ERROR(write_output_file(to, bytes, "tokenizer file"));
    files.tokenizer.push_back(to);
  }
  STRATA_ASSIGN_OR_RETURN(files.removed, remove_stale(target, written, sharded));
  return files;
}

}  // namespace strata
