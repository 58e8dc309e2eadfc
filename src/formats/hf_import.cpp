// Hugging Face import; Note [Hugging Face import] in hf_import.h.
#include "formats/hf_import.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/file_util.h"
#include "core/json_util.h"
#include "core/slow_progress.h"
#include "formats/safetensors_f32.h"
#include "model/hf_config.h"
#include "model/hf_names.h"
#include "model/init.h"

namespace strata {

namespace {

namespace fs = std::filesystem;

// ---- Which files hold the weights -------------------------------------------------------------

// A shard name from an index: a plain file name in the model's directory.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// The shards of `index_path` in order of first mention, and the shard of every tensor.
Status read_shard_index(const std::string& dir, const std::string& index_path,
                        std::vector<std::string>& files,
                        std::map<std::string, std::string>& shard_of) {
  STRATA_ASSIGN_OR_RETURN(nlohmann::json index, read_json_file(index_path));
  const auto map = index.is_object() ? index.find("weight_map") : index.end();
  if (map == index.end() || !map->is_object() || map->empty()) {
    return bad_format(index_path + ": weight_map must be an object naming each tensor's shard");
  }
  for (const auto& [tensor, file] : map->items()) {
    if (!file.is_string() || !is_plain_file_name(file.get<std::string>())) {
      return bad_format(index_path + ": weight_map puts tensor '" + printable(tensor) + "' in " +
                        json_preview(file) + ", which is not a file name in " + dir);
    }
    const std::string name = file.get<std::string>();
    if (std::find(files.begin(), files.end(), name) == files.end()) {
      const std::string path = (fs::path(dir) / name).string();
      std::error_code ec;
      if (!fs::exists(path, ec)) {
        return not_found(index_path + " names shard " + name + " (for tensor '" +
                         printable(tensor) + "'), which does not exist");
      }
      files.push_back(name);
    }
    shard_of[tensor] = name;
  }
  return Status();
}

// ---- Which tensors are what -------------------------------------------------------------------

// "h.{l}<suffix>" with l in [0, n_layer) and suffix one of `suffixes`.
bool is_layer_buffer(const std::string& name, const std::string& prefix,
                     std::initializer_list<const char*> suffixes, int64_t n_layer) {
  if (name.rfind(prefix, 0) != 0) return false;
  size_t end = prefix.size();
  while (end < name.size() && end < prefix.size() + 5 &&
         std::isdigit(static_cast<unsigned char>(name[end]))) {
    ++end;
  }
  if (end == prefix.size() || (name[prefix.size()] == '0' && end > prefix.size() + 1)) return false;
  if (std::stoll(name.substr(prefix.size(), end - prefix.size())) >= n_layer) return false;
  const std::string rest = name.substr(end);
  return std::any_of(suffixes.begin(), suffixes.end(), [&](const char* s) { return rest == s; });
}

// Buffers HF's loader reads past (Note [Hugging Face import]); names without GPT-2's prefix.
bool is_ignorable_buffer(const ModelConfig& m, const std::string& name) {
  if (m.arch == ModelArch::gpt2) {
    return is_layer_buffer(name, "h.", {".attn.bias", ".attn.masked_bias"}, m.n_layer);
  }
  return is_layer_buffer(name, "model.layers.", {".self_attn.rotary_emb.inv_freq"}, m.n_layer);
}

// GPT2LMHeadModel's state dict prefixes the transformer's tensors; Strata's names do not.
std::string without_prefix(const ModelConfig& m, const std::string& name) {
  const std::string prefix = "transformer.";
  if (m.arch == ModelArch::gpt2 && name.rfind(prefix, 0) == 0) return name.substr(prefix.size());
  return name;
}

// A tensor found in the files, by its name without GPT-2's prefix.
struct Found {
  size_t file = 0;
  const StEntry* entry = nullptr;
};

// Every tensor of the files once, by its name without GPT-2's prefix, where the index (if any)
// says it is; the index's tensors all in the shards it names.
Result<std::map<std::string, Found>> find_tensors(
    const HfImportPlan& plan, const std::vector<std::string>& names,
    const std::vector<SafeTensorsHeader>& headers,
    const std::map<std::string, std::string>& shard_of) {
  std::map<std::string, Found> found;
  for (size_t f = 0; f < headers.size(); ++f) {
    for (const StEntry& e : headers[f].tensors) {
      if (!plan.index.empty()) {
        auto it = shard_of.find(e.name);
        if (it == shard_of.end() || it->second != names[f]) {
          return bad_format(
              plan.files[f] + ": tensor '" + printable(e.name) + "' is not in " + plan.index +
              "'s weight_map" +
              (it == shard_of.end() ? "" : " for this shard (it says " + it->second + ")"));
        }
      }
      const std::string name = without_prefix(plan.model, e.name);
      auto [at, fresh] = found.emplace(name, Found{f, &e});
      if (!fresh) {
        const Found& first = at->second;
        return bad_format(plan.files[f] + ": tensor '" + printable(e.name) + "' is also in " +
                          plan.files[first.file] + " as '" + printable(first.entry->name) + "'");
      }
    }
  }
  for (const auto& [tensor, shard] : shard_of) {
    const size_t f =
        static_cast<size_t>(std::find(names.begin(), names.end(), shard) - names.begin());
    if (headers[f].find(tensor) == nullptr) {
      return bad_format(plan.index + ": weight_map puts tensor '" + printable(tensor) + "' in " +
                        shard + ", which does not hold it");
    }
  }

  return found;
}

// Each tensor of the layout: present, of HF's shape, a float dtype; moved from `found` into
// plan.tensors. `weights` names where a missing tensor should have been.
Status take_layout_tensors(HfImportPlan& plan, const ParamLayout& layout,
                           std::map<std::string, Found>& found, const std::string& weights) {
  const char* arch = enum_name(plan.model.arch);
  std::vector<bool> seen_dtype(5, false);
  for (int64_t i = 0; i < static_cast<int64_t>(layout.tensors.size()); ++i) {
    const HfTensor h = hf_tensor(layout, i);
    auto it = found.find(h.name);
    if (it == found.end()) {
      return bad_format(weights + ": tensor '" + h.name + "' is missing (the " + arch +
                        " model of " + plan.config_path + " has it)");
    }
    const StEntry& e = *it->second.entry;
    const std::string& file = plan.files[it->second.file];
    if (!is_float_dtype(e.dtype)) {
      return bad_format(file + ": tensor '" + e.name + "' is " + st_dtype_name(e.dtype) +
                        ", expected F32, BF16 or F16");
    }
    if (e.shape != h.shape) {
      return bad_format(file + ": tensor '" + e.name + "' has shape " + shape_text(e.shape) +
                        ", expected " + shape_text(h.shape) + " for the model of " +
                        plan.config_path);
    }
    plan.tensors.push_back({it->second.file, e});
    plan.data_bytes += e.bytes;
    seen_dtype[static_cast<size_t>(e.dtype)] = true;
    found.erase(it);
  }
  for (StDType t : {StDType::f32, StDType::bf16, StDType::f16}) {
    if (!seen_dtype[static_cast<size_t>(t)]) continue;
    plan.dtypes += (plan.dtypes.empty() ? "" : " and ") + std::string(st_dtype_name(t));
  }
  return Status();
}

// What is left after the layout's tensors must be a buffer HF ignores too (or a tied model's
// lm_head copy); listed in plan.ignored.
Status check_leftovers(HfImportPlan& plan, const ParamLayout& layout,
                       const std::map<std::string, Found>& found) {
  const char* arch = enum_name(plan.model.arch);
  const HfTensor wte = hf_tensor(layout, 0);  // the token embedding leads the layout
  for (const auto& [name, where] : found) {
    const StEntry& e = *where.entry;
    const std::string& file = plan.files[where.file];
    if (name == "lm_head.weight" && plan.model.tie_embeddings) {
      if (e.shape != wte.shape || !is_float_dtype(e.dtype)) {
        return bad_format(file + ": tensor 'lm_head.weight' of a tied model is " +
                          st_dtype_name(e.dtype) + " " + shape_text(e.shape) + ", expected " +
                          shape_text(wte.shape) + " like '" + wte.name + "'");
      }
    } else if (!is_ignorable_buffer(plan.model, name)) {
      return bad_format(file + ": tensor '" + printable(e.name) + "' is not a parameter of the " +
                        arch + " model of " + plan.config_path);
    }
    plan.ignored.push_back(e.name);
  }
  return Status();
}

}  // namespace

Result<HfImportPlan> plan_hf_import(const std::string& dir) {
  HfImportPlan plan;
  plan.dir = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return not_found(dir +
                     ": no such directory (a Hugging Face model's: config.json and "
                     "model.safetensors)");
  }
  plan.config_path = (fs::path(dir) / "config.json").string();
  STRATA_ASSIGN_OR_RETURN(nlohmann::json config, read_json_file(plan.config_path));
  STRATA_ASSIGN_OR_RETURN(plan.model, model_config_from_hf(config, plan.config_path));
  const ParamLayout layout = make_param_layout(plan.model);

  // The files, and for shards where the index says each tensor is.
  const std::string single = (fs::path(dir) / "model.safetensors").string();
  const std::string index = (fs::path(dir) / "model.safetensors.index.json").string();
  std::map<std::string, std::string> shard_of;  // index: tensor -> shard file name
  std::vector<std::string> names;
  if (fs::exists(single, ec)) {
    names.push_back("model.safetensors");
  } else if (fs::exists(index, ec)) {
    plan.index = index;
    STRATA_RETURN_IF_ERROR(read_shard_index(dir, index, names, shard_of));
  } else {
    return not_found(dir +
                     " has neither model.safetensors nor model.safetensors.index.json "
                     "(Strata imports safetensors weights; pytorch_model.bin is not read)");
  }
  std::vector<SafeTensorsHeader> headers;
  for (const std::string& name : names) {
    plan.files.push_back((fs::path(dir) / name).string());
    STRATA_ASSIGN_OR_RETURN(SafeTensorsHeader h, read_safetensors_header(plan.files.back()));
    headers.push_back(std::move(h));
  }
  // Where the errors about a missing tensor point: the file, or the index of the shards.
  const std::string weights = plan.index.empty() ? plan.files.front() : plan.index;

  STRATA_ASSIGN_OR_RETURN(auto found, find_tensors(plan, names, headers, shard_of));
  STRATA_RETURN_IF_ERROR(take_layout_tensors(plan, layout, found, weights));
  STRATA_RETURN_IF_ERROR(check_leftovers(plan, layout, found));
  plan.parameter_count = layout.parameter_count;
  return plan;
}

namespace {

// Fills slab pieces from the plan's files (Note [Hugging Face import]).
class HfSlabFiller {
 public:
  HfSlabFiller(const HfImportPlan& plan, const ParamLayout& layout, int64_t chunk_bytes,
               uint64_t seed)
      : plan_(plan), layout_(layout), chunk_bytes_(chunk_bytes), seed_(seed) {}

  Status open() {
    for (const std::string& path : plan_.files) {
      STRATA_ASSIGN_OR_RETURN(ReadOnlyFile f, ReadOnlyFile::open(path, "safetensors"));
      f.count_reads_in(&reads_);
      files_.push_back(std::make_unique<ReadOnlyFile>(std::move(f)));
    }
    return Status();
  }

  // Piece `p` of slab `slab`; pieces come in order and cover the slab (internal otherwise).
  Status fill(int64_t slab, const SlabPiece& p) {
    const Slab& s = layout_.slabs[static_cast<size_t>(slab)];
    if (p.begin != next_ || p.count <= 0 || p.begin + p.count > s.numel) {
      return internal_error("import: piece [" + std::to_string(p.begin) + ", +" +
                            std::to_string(p.count) + ") of slab " + s.name +
                            " does not follow element " + std::to_string(next_) + " of " +
                            std::to_string(s.numel));
    }
    const int64_t end = p.begin + p.count;
    std::fill_n(p.master, p.count, 0.0f);  // the padding between tensors
    std::fill_n(p.m, p.count, 0.0f);
    std::fill_n(p.v, p.count, 0.0f);
    for (int64_t i = s.first_tensor; i < s.first_tensor + s.tensor_count; ++i) {
      const ParamTensor& t = layout_.tensors[static_cast<size_t>(i)];
      const int64_t t0 = t.offset - s.offset, t1 = t0 + t.numel();
      const int64_t lo = std::max(t0, p.begin), hi = std::min(t1, end);
      if (lo >= hi) continue;
      STRATA_RETURN_IF_ERROR(tensor_range(i, p.master + (lo - p.begin), lo - t0, hi - t0));
    }
    next_ = end;
    return Status();
  }
  // Starts slab `slab`; finish_slab checks that its pieces covered it.
  void start_slab() { next_ = 0; }
  Status finish_slab(int64_t slab) const {
    const Slab& s = layout_.slabs[static_cast<size_t>(slab)];
    if (next_ == s.numel) return Status();
    return internal_error("import: the trainer's pieces covered " + std::to_string(next_) +
                          " of the " + std::to_string(s.numel) + " elements of slab " + s.name);
  }

  int64_t bytes_read() const { return reads_.bytes; }
  int64_t buffer_bytes() const { return buffer_bytes_; }

 private:
  // Elements [lo, hi) of tensor i (Strata's layout) into dst, as f32.
  Status tensor_range(int64_t i, float* dst, int64_t lo, int64_t hi) {
    const ParamTensor& t = layout_.tensors[static_cast<size_t>(i)];
    if (t.lora_slot >= 0) {  // an adapter starts from the seed (Note [LoRA]), whole, then cut
      if (converted_tensor_ != i) {
        grow(converted_, t.numel());
        init_param_tensor(layout_, i, converted_.data(), seed_);
        converted_tensor_ = i;
      }
      std::memcpy(dst, converted_.data() + lo, static_cast<size_t>(hi - lo) * 4);
      return Status();
    }
    if (!hf_tensor(layout_, i).transposed) return read_elements(i, dst, lo, hi);
    // A transposed weight: read whole and converted; kept while the pieces cut it.
    if (lo == 0 && hi == t.numel()) return read_transposed(i, dst);
    if (converted_tensor_ != i) {
      grow(converted_, t.numel());
      STRATA_RETURN_IF_ERROR(read_transposed(i, converted_.data()));
      converted_tensor_ = i;
    }
    std::memcpy(dst, converted_.data() + lo, static_cast<size_t>(hi - lo) * 4);
    return Status();
  }

  // The whole of transposed tensor i in Strata's layout, through the staging scratch.
  Status read_transposed(int64_t i, float* dst) {
    const ParamTensor& t = layout_.tensors[static_cast<size_t>(i)];
    grow(staged_, t.numel());
    STRATA_RETURN_IF_ERROR(read_elements(i, staged_.data(), 0, t.numel()));
    from_hf_layout(t, staged_.data(), dst);
    return Status();
  }

  // Elements [lo, hi) of tensor i as the file lays them out, widened into dst.
  Status read_elements(int64_t i, float* dst, int64_t lo, int64_t hi) {
    // A base tensor's seed index is its index in the layout without adapters, the plan's.
    const HfImportSource& src = plan_.tensors[layout_.tensors[static_cast<size_t>(i)].seed_index];
    const ReadOnlyFile& file = *files_[src.file];
    const StEntry& e = src.entry;
    const int64_t size = st_dtype_size(e.dtype);
    if (e.dtype == StDType::f32) return file.read_at(dst, (hi - lo) * 4, e.offset + lo * 4);
    const int64_t per_chunk = std::max<int64_t>(1, chunk_bytes_ / size);
    if (chunk_.empty()) {
      chunk_.resize(static_cast<size_t>(per_chunk * size));
      note_buffers();
    }
    for (int64_t at = lo; at < hi;) {
      const int64_t n = std::min(per_chunk, hi - at);
      STRATA_RETURN_IF_ERROR(file.read_at(chunk_.data(), n * size, e.offset + at * size));
      widen_to_f32(e.dtype, chunk_.data(), n, dst + (at - lo));
      at += n;
    }
    return Status();
  }

  void grow(std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) >= n) return;
    v.resize(static_cast<size_t>(n));
    note_buffers();
  }
  void note_buffers() {
    const int64_t bytes = static_cast<int64_t>(chunk_.size()) +
                          4 * static_cast<int64_t>(staged_.size() + converted_.size());
    buffer_bytes_ = std::max(buffer_bytes_, bytes);
  }

  const HfImportPlan& plan_;
  const ParamLayout& layout_;
  int64_t chunk_bytes_;
  uint64_t seed_;
  std::vector<std::unique_ptr<ReadOnlyFile>> files_;
  ReadStats reads_;
  std::vector<uint8_t> chunk_;    // (chunk_bytes) BF16 or F16 data as read
  std::vector<float> staged_;     // (numel) a transposed tensor as the file holds it, widened
  std::vector<float> converted_;  // (numel) a transposed tensor in Strata's layout
  int64_t converted_tensor_ = -1;
  int64_t next_ = 0;  // the slab element the next piece must start at
  int64_t buffer_bytes_ = 0;
};

}  // namespace

struct HfSlabReader::Impl {
  HfImportPlan plan;
  ParamLayout layout;
  HfSlabFiller filler;
  std::vector<float> moments;  // (2, largest slab): the pieces' m and v, which nothing reads
  Impl(HfImportPlan p, ParamLayout l)
      : plan(std::move(p)), layout(std::move(l)), filler(plan, layout, int64_t{16} << 20, 0) {}
};

HfSlabReader::HfSlabReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfSlabReader::~HfSlabReader() = default;
HfSlabReader::HfSlabReader(HfSlabReader&&) noexcept = default;

Result<HfSlabReader> HfSlabReader::open(const HfImportPlan& plan) {
  auto impl = std::make_unique<Impl>(plan, make_param_layout(plan.model));
  STRATA_RETURN_IF_ERROR(impl->filler.open());
  return HfSlabReader(std::move(impl));
}

Status HfSlabReader::read(int64_t slab, float* dst) {
  const int64_t n = impl_->layout.slabs.at(static_cast<size_t>(slab)).numel;
  if (static_cast<int64_t>(impl_->moments.size()) < 2 * n) {
    impl_->moments.resize(static_cast<size_t>(2 * n));
  }
  float* m = impl_->moments.data();
  impl_->filler.start_slab();
  STRATA_RETURN_IF_ERROR(impl_->filler.fill(slab, {0, n, dst, m, m + n}));
  return impl_->filler.finish_slab(slab);
}

Result<HfImportStats> import_hf_weights(const HfImportPlan& plan, const ParamLayout& layout,
                                        const SlabWriter& write_slab,
                                        const HfImportOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (options.chunk_bytes <= 0) {
    return invalid_argument("import read chunk of " + std::to_string(options.chunk_bytes) +
                            " bytes; it must be positive");
  }
  if (auto d = model_difference(hf_canonical(layout.config), plan.model)) {
    return internal_error("import of " + plan.dir + " into a trainer of another model: " + d->key +
                          " " + d->a + " vs " + d->b);
  }
  const auto base_tensors =
      static_cast<size_t>(std::count_if(layout.tensors.begin(), layout.tensors.end(),
                                        [](const ParamTensor& t) { return t.lora_slot < 0; }));
  if (plan.tensors.size() != base_tensors) {
    return internal_error("import plan of " + plan.dir + " has " +
                          std::to_string(plan.tensors.size()) + " tensors, the layout " +
                          std::to_string(layout.tensors.size()));
  }
  HfSlabFiller filler(plan, layout, options.chunk_bytes, options.seed);
  STRATA_RETURN_IF_ERROR(filler.open());
  SlowProgress progress("importing " + plan.dir, static_cast<int64_t>(layout.slabs.size()),
                        "slabs");
  for (int64_t si = 0; si < static_cast<int64_t>(layout.slabs.size()); ++si) {
    progress.update(si);
    filler.start_slab();
    STRATA_RETURN_IF_ERROR(write_slab(si, [&](const SlabPiece& p) { return filler.fill(si, p); }));
    STRATA_RETURN_IF_ERROR(filler.finish_slab(si));
  }
  HfImportStats stats;
  stats.tensors = static_cast<int64_t>(plan.tensors.size());
  stats.parameters = layout.parameter_count;
  stats.bytes_read = filler.bytes_read();
  stats.buffer_bytes = filler.buffer_bytes();
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return stats;
}

}  // namespace strata
