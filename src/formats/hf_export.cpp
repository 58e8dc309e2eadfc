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

#include "core/file_util.h"
#include "core/output_file.h"
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

// The export's directory, made if needed; never the checkpoint itself, whose model.safetensors
// and config.json the export would overwrite.
Status prepare_directory(const ExportTarget& target, const std::string& out,
                         const std::string& checkpoint) {
  std::error_code ec;
  fs::create_directories(target.dir, ec);
  if (ec) {
    return invalid_argument(target.dir.string() + ": cannot create directory: " + ec.message());
  }
  if (fs::equivalent(target.dir, checkpoint, ec)) {
    return invalid_argument("--out " + out + " is inside the checkpoint " + checkpoint +
                            "; export to another directory");
  }
  return Status();
}

// The tensors `which` of `all`, copied from `src` in order through `chunk` into a new
// safetensors file at `path`.
Status write_weights_file(const ReadOnlyFile& src, const std::vector<StEntry>& all,
                          const std::vector<size_t>& which, const std::string& path,
                          std::vector<uint8_t>& chunk) {
  std::vector<StEntry> entries;
  for (size_t i : which) entries.push_back(all[i]);
  // transformers' loader refuses safetensors files without format "pt" in the metadata.
  STRATA_ASSIGN_OR_RETURN(SafeTensorsWriter w,
                          SafeTensorsWriter::create(path, entries, {{"format", "pt"}}));
  for (const StEntry& e : entries) {
    for (int64_t done = 0; done < e.bytes;) {
      const int64_t n = std::min<int64_t>(static_cast<int64_t>(chunk.size()), e.bytes - done);
      STRATA_RETURN_IF_ERROR(src.read_at(chunk.data(), n, e.offset + done));
      STRATA_RETURN_IF_ERROR(w.append(chunk.data(), n));
      done += n;
    }
  }
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

Status check_hf_export_out(const std::string& out) {
  if (out.empty()) return invalid_argument("--out is empty");
  const ExportTarget target = export_target(out);
  STRATA_RETURN_IF_ERROR(check_output_dir(target.dir.string(), "export directory"));
  for (const std::string& name : {target.single, target.index(), std::string("config.json")}) {
    STRATA_RETURN_IF_ERROR(check_output_path((target.dir / name).string(), "export file"));
  }
  return Status::ok_status();
}

Result<HfExportPlan> plan_hf_export(const std::string& checkpoint_dir,
                                    const CheckpointReadOptions& options) {
  // The weights and the config come from bytes the manifest vouched for, so a torn or corrupted
  // checkpoint is refused here rather than exported as plausible-looking weights. The optimizer
  // state, twice the weights, is not read.
  STRATA_RETURN_IF_ERROR(
      verify_checkpoint_files(checkpoint_dir, {"config.json", "model.safetensors"}, options));
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
  plan.weights_path = header.path;
  STRATA_ASSIGN_OR_RETURN(plan.tensors, hf_tensors_of(header, layout, config_path));
  plan.parameter_count = layout.parameter_count;
  return plan;
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
  const ExportTarget target = export_target(out);
  STRATA_RETURN_IF_ERROR(prepare_directory(target, out, plan.checkpoint));

  std::vector<int64_t> bytes;
  for (const StEntry& e : plan.tensors) bytes.push_back(e.bytes);
  const std::vector<std::vector<size_t>> shards = group_into_shards(bytes, shard_bytes);
  const bool sharded = shards.size() > 1;

  STRATA_ASSIGN_OR_RETURN(ReadOnlyFile src,
                          ReadOnlyFile::open(plan.weights_path, "checkpoint file"));
  if (options.stats != nullptr) src.count_reads_in(&options.stats->reads);
  int64_t largest = 1;
  for (int64_t b : bytes) largest = std::max(largest, b);
  std::vector<uint8_t> chunk(static_cast<size_t>(std::min(options.chunk_bytes, largest)));
  if (options.stats != nullptr) options.stats->note_buffers(static_cast<int64_t>(chunk.size()));

  HfExportFiles files;
  std::set<std::string> written;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name = sharded ? target.shard(s, shards.size()) : target.single;
    const std::string path = (target.dir / name).string();
    STRATA_RETURN_IF_ERROR(write_weights_file(src, plan.tensors, shards[s], path, chunk));
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
  STRATA_RETURN_IF_ERROR(write_output_file(files.config, hf_config_json_for(plan.model), "config"));
  STRATA_ASSIGN_OR_RETURN(files.removed, remove_stale(target, written, sharded));
  return files;
}

}  // namespace strata
