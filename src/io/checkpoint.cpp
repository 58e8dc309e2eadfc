// Checkpoint save, verify and load; Note [Checkpoint format] in checkpoint.h.
#include "io/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "core/file_util.h"
#include "io/crc32c.h"
#include "io/safetensors.h"
#include "model/hf_names.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "strata-checkpoint";
constexpr int kVersion = 1;

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

Status errno_status(const std::string& what) {
  const int e = errno;
  const std::string m = what + ": " + std::strerror(e) + " (errno " + std::to_string(e) + ")";
  return e == ENOSPC ? Status(ErrorCode::no_space, m) : io_error(m);
}

Status fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status("open " + path + " for fsync");
  const int rc = ::fsync(fd);
  Status st = rc == 0 ? Status() : errno_status("fsync " + path);
  ::close(fd);
  return st;
}

// A file written front to back through the engine, its CRC32C and size kept as it grows.
class SequentialFile {
 public:
  static Result<SequentialFile> create(IoEngine& engine, const std::string& path) {
    STRATA_ASSIGN_OR_RETURN(auto f, open_io_file(path, /*create=*/true, /*direct=*/false));
    return SequentialFile(engine, std::move(f));
  }
  Status append(const void* data, int64_t bytes) {
    if (bytes == 0) return Status();
    IoRequest r;
    r.op = IoOp::write;
    r.file = file_.get();
    r.offset = static_cast<uint64_t>(size_);
    r.buffer = const_cast<void*>(data);
    r.length = static_cast<uint64_t>(bytes);
    STRATA_ASSIGN_OR_RETURN(Ticket t, engine_->submit(r));
    STRATA_RETURN_IF_ERROR(engine_->wait(t));
    crc_ = crc32c(data, static_cast<size_t>(bytes), crc_);
    size_ += bytes;
    return Status();
  }
  // fsync and close.
  Status finish() {
    if (::fsync(file_->fd) != 0) return errno_status("fsync " + file_->path);
    close_io_file(*file_);
    return Status();
  }
  uint32_t crc() const { return crc_; }
  int64_t size() const { return size_; }

 private:
  SequentialFile(IoEngine& engine, std::unique_ptr<IoFile> f)
      : engine_(&engine), file_(std::move(f)) {}
  IoEngine* engine_;
  std::unique_ptr<IoFile> file_;
  uint32_t crc_ = 0;
  int64_t size_ = 0;
};

// The safetensors header for tensors streamed in the order given (io/safetensors.h).
struct StreamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t bytes = 0;
};
std::string safetensors_header(const std::vector<StreamedTensor>& tensors,
                               const nlohmann::ordered_json& metadata) {
  nlohmann::ordered_json h;
  h["__metadata__"] = metadata;
  int64_t off = 0;
  for (const StreamedTensor& t : tensors) {
    h[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes}}};
    off += t.bytes;
  }
  return safetensors_header_bytes(h);
}

struct ManifestEntry {
  std::string name;
  int64_t bytes;
  uint32_t crc;
};

Status write_text(IoEngine& engine, const std::string& dir, const std::string& name,
                  const std::string& text, std::vector<ManifestEntry>* manifest) {
  STRATA_ASSIGN_OR_RETURN(SequentialFile f, SequentialFile::create(engine, dir + "/" + name));
  STRATA_RETURN_IF_ERROR(f.append(text.data(), static_cast<int64_t>(text.size())));
  STRATA_RETURN_IF_ERROR(f.finish());
  if (manifest != nullptr) manifest->push_back({name, f.size(), f.crc()});
  return Status();
}

// Appends tensor t's values (Strata layout at `values`) to f in HF layout: straight from
// `values`, or through `scratch` when HF holds the matrix transposed.
Status append_in_hf_layout(SequentialFile& f, const ParamTensor& t, bool transposed,
                           const float* values, std::vector<float>& scratch) {
  const int64_t bytes = t.numel() * 4;
  if (!transposed) return f.append(values, bytes);
  to_hf_layout(t, values, scratch.data());
  return f.append(scratch.data(), bytes);
}

Status write_checkpoint_files(IoEngine& engine, const std::string& dir, const TrainConfig& cfg,
                              const CheckpointMeta& meta, const SlabReader& read,
                              int64_t* total_bytes) {
  const ParamLayout layout = make_param_layout(cfg.model);
  std::vector<StreamedTensor> model_tensors, optim_tensors;
  for (int64_t i = 0; i < static_cast<int64_t>(layout.tensors.size()); ++i) {
    const HfTensor h = hf_tensor(layout, i);
    const int64_t bytes = layout.tensors[static_cast<size_t>(i)].numel() * 4;
    model_tensors.push_back({h.name, h.shape, bytes});
    optim_tensors.push_back({"exp_avg." + h.name, h.shape, bytes});
    optim_tensors.push_back({"exp_avg_sq." + h.name, h.shape, bytes});
  }
  const nlohmann::ordered_json md = {{"format", kFormat}, {"version", std::to_string(kVersion)}};
  STRATA_ASSIGN_OR_RETURN(SequentialFile model,
                          SequentialFile::create(engine, dir + "/model.safetensors"));
  STRATA_ASSIGN_OR_RETURN(SequentialFile optim,
                          SequentialFile::create(engine, dir + "/optimizer.safetensors"));
  const std::string mh = safetensors_header(model_tensors, md);
  const std::string oh = safetensors_header(optim_tensors, md);
  STRATA_RETURN_IF_ERROR(model.append(mh.data(), static_cast<int64_t>(mh.size())));
  STRATA_RETURN_IF_ERROR(optim.append(oh.data(), static_cast<int64_t>(oh.size())));

  // One slab at a time: its state, then its tensors in HF layout, appended in file order.
  // Tensors HF lays out as Strata does are appended straight from the slab's state; a Conv1D
  // weight (transposed) goes through one scratch sized for the largest of them. So the save holds
  // the largest slab's master, m and v (the embedding's, V x C, usually) and one block matrix.
  // The buffers are sized once and reused: fresh large allocations per slab cost more in page
  // faults than the copy itself.
  int64_t max_numel = 0, max_transposed = 0;
  for (const Slab& s : layout.slabs) max_numel = std::max(max_numel, s.numel);
  for (int64_t i = 0; i < static_cast<int64_t>(layout.tensors.size()); ++i) {
    if (hf_tensor(layout, i).transposed) {
      max_transposed = std::max(max_transposed, layout.tensors[static_cast<size_t>(i)].numel());
    }
  }
  const auto cap = static_cast<size_t>(max_numel);
  std::vector<float> master(cap), m(cap), v(cap);
  std::vector<float> scratch(static_cast<size_t>(max_transposed));  // (largest Conv1D weight)
  for (size_t si = 0; si < layout.slabs.size(); ++si) {
    const Slab& s = layout.slabs[si];
    STRATA_RETURN_IF_ERROR(read(static_cast<int64_t>(si), master.data(), m.data(), v.data()));
    for (int64_t i = s.first_tensor; i < s.first_tensor + s.tensor_count; ++i) {
      const ParamTensor& t = layout.tensors[static_cast<size_t>(i)];
      const bool transposed = hf_tensor(layout, i).transposed;
      const int64_t at = t.offset - s.offset;
      STRATA_RETURN_IF_ERROR(
          append_in_hf_layout(model, t, transposed, master.data() + at, scratch));
      STRATA_RETURN_IF_ERROR(append_in_hf_layout(optim, t, transposed, m.data() + at, scratch));
      STRATA_RETURN_IF_ERROR(append_in_hf_layout(optim, t, transposed, v.data() + at, scratch));
    }
  }
  STRATA_RETURN_IF_ERROR(model.finish());
  STRATA_RETURN_IF_ERROR(optim.finish());
  std::vector<ManifestEntry> manifest = {{"model.safetensors", model.size(), model.crc()},
                                         {"optimizer.safetensors", optim.size(), optim.crc()}};
  STRATA_RETURN_IF_ERROR(
      write_text(engine, dir, "config.json", config_to_json(cfg).dump(2) + "\n", &manifest));
  const nlohmann::json state = {{"step", meta.step},
                                {"adam_steps", meta.adam_steps},
                                {"data_position", meta.data_position},
                                {"seed", meta.seed},
                                {"schedule", meta.schedule}};
  STRATA_RETURN_IF_ERROR(
      write_text(engine, dir, "trainer_state.json", state.dump(2) + "\n", &manifest));
  nlohmann::json files = nlohmann::json::array();
  for (const ManifestEntry& e : manifest) {
    files.push_back({{"name", e.name}, {"bytes", e.bytes}, {"crc32c", hex32(e.crc)}});
    *total_bytes += e.bytes;
  }
  const nlohmann::json mf = {
      {"format", kFormat}, {"version", kVersion}, {"step", meta.step}, {"files", files}};
  const std::string text = mf.dump(2) + "\n";
  *total_bytes += static_cast<int64_t>(text.size());
  return write_text(engine, dir, "manifest.json", text, nullptr);
}

// step-* directories of root with their step numbers, oldest first.
std::vector<std::pair<int64_t, std::string>> step_dirs(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || name.rfind("step-", 0) != 0) continue;
    char* end = nullptr;
    const long long step = std::strtoll(name.c_str() + 5, &end, 10);
    if (end == nullptr || *end != '\0' || name.size() == 5) continue;
    out.emplace_back(step, e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<nlohmann::json> read_json(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, read_whole_file(path, "checkpoint file"));
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return bad_format("checkpoint file " + path + " is not valid JSON: " + e.what());
  }
}

}  // namespace

Result<CheckpointSaveStats> save_checkpoint(IoEngine& engine, const std::string& root,
                                            const TrainConfig& cfg, const CheckpointMeta& meta,
                                            const SlabReader& read, int64_t keep) {
  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return io_error("cannot create checkpoint directory " + root + ": " + ec.message());
  // Leftovers of saves that a crash interrupted.
  for (const auto& e : fs::directory_iterator(root, ec)) {
    if (e.path().filename().string().rfind(".tmp-step-", 0) == 0) fs::remove_all(e.path(), ec);
  }
  CheckpointSaveStats stats;
  stats.dir = (fs::path(root) / step_name(meta.step)).string();
  if (fs::exists(fs::path(stats.dir) / "manifest.json")) return stats;  // the same state

  const std::string tmp =
      (fs::path(root) / (".tmp-" + step_name(meta.step) + "-" + std::to_string(::getpid())))
          .string();
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  if (ec) return io_error("cannot create " + tmp + ": " + ec.message());
  Status st = write_checkpoint_files(engine, tmp, cfg, meta, read, &stats.bytes);
  if (st.ok()) st = fsync_path(tmp);
  if (st.ok()) {
    fs::rename(tmp, stats.dir, ec);
    if (ec) st = io_error("cannot publish checkpoint " + stats.dir + ": " + ec.message());
  }
  if (!st.ok()) {
    fs::remove_all(tmp, ec);
    return Status(st.code(), "checkpoint " + stats.dir + " not written: " + st.message());
  }
  STRATA_RETURN_IF_ERROR(fsync_path(root));
  if (keep > 0) {
    auto dirs = step_dirs(root);
    for (size_t i = 0; i + static_cast<size_t>(keep) < dirs.size(); ++i) {
      fs::remove_all(dirs[i].second, ec);
    }
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return stats;
}

namespace {

struct ManifestFile {
  std::string name;
  int64_t bytes = -1;
  std::string crc32c;  // 8 hex digits
};

// The files that the manifest of `dir` lists.
Result<std::vector<ManifestFile>> read_manifest(const std::string& dir) {
  const std::string mpath = dir + "/manifest.json";
  if (!fs::exists(mpath)) {
    return not_found("checkpoint " + dir + " has no manifest.json (not a complete checkpoint)");
  }
  STRATA_ASSIGN_OR_RETURN(nlohmann::json m, read_json(mpath));
  if (!m.is_object() || m.value("format", "") != kFormat || !m.contains("files") ||
      !m["files"].is_array()) {
    return bad_format("checkpoint manifest " + mpath + " is not a Strata checkpoint manifest");
  }
  if (m.value("version", 0) != kVersion) {
    return bad_format("checkpoint manifest " + mpath + " has version " +
                      m.value("version", nlohmann::json(0)).dump() + ", this build reads " +
                      std::to_string(kVersion));
  }
  std::vector<ManifestFile> files;
  for (const auto& f : m["files"]) {
    if (!f.is_object()) {
      return bad_format("checkpoint manifest " + mpath + " has a file entry that is not an object");
    }
    files.push_back({f.value("name", ""), f.value("bytes", int64_t{-1}), f.value("crc32c", "")});
  }
  return files;
}

// A checkpoint file opened for reading, its reads counted in the options' stats.
Result<ReadOnlyFile> open_checkpoint_file(const std::string& path,
                                          const CheckpointReadOptions& options) {
  if (!fs::exists(path)) return not_found("checkpoint file " + path + " is missing");
  STRATA_ASSIGN_OR_RETURN(ReadOnlyFile f, ReadOnlyFile::open(path, "checkpoint file"));
  if (options.stats != nullptr) f.count_reads_in(&options.stats->reads);
  return f;
}

// The CRC32C of the whole file, read front to back through `chunk`.
Result<uint32_t> crc32c_of(const ReadOnlyFile& f, std::vector<uint8_t>& chunk) {
  uint32_t crc = 0;
  for (int64_t at = 0; at < f.size();) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(chunk.size()), f.size() - at);
    STRATA_RETURN_IF_ERROR(f.read_at(chunk.data(), n, at));
    crc = crc32c(chunk.data(), static_cast<size_t>(n), crc);
    at += n;
  }
  return crc;
}

// One listed file's size and CRC32C against the manifest's.
Status verify_file(const std::string& dir, const ManifestFile& want, std::vector<uint8_t>& chunk,
                   const CheckpointReadOptions& options) {
  const std::string path = dir + "/" + want.name;
  STRATA_ASSIGN_OR_RETURN(ReadOnlyFile f, open_checkpoint_file(path, options));
  if (f.size() != want.bytes) {
    return bad_format("checkpoint file " + path + " has " + std::to_string(f.size()) +
                      " bytes, the manifest says " + std::to_string(want.bytes));
  }
  STRATA_ASSIGN_OR_RETURN(uint32_t crc, crc32c_of(f, chunk));
  if (hex32(crc) != want.crc32c) {
    return bad_format("checkpoint file " + path + " is corrupt: CRC32C " + hex32(crc) +
                      ", the manifest says " + want.crc32c);
  }
  return Status();
}

// Verifies the listed files that `wanted` accepts, in manifest order, through one chunk buffer
// no larger than the largest of them. Returns their names.
Result<std::set<std::string>> verify_files(const std::string& dir,
                                           const CheckpointReadOptions& options,
                                           const std::function<bool(const std::string&)>& wanted) {
  if (options.chunk_bytes <= 0) {
    return invalid_argument("checkpoint read chunk of " + std::to_string(options.chunk_bytes) +
                            " bytes; it must be positive");
  }
  STRATA_ASSIGN_OR_RETURN(std::vector<ManifestFile> files, read_manifest(dir));
  int64_t largest = 1;
  for (const ManifestFile& f : files) {
    if (wanted(f.name)) largest = std::max(largest, f.bytes);
  }
  std::vector<uint8_t> chunk(static_cast<size_t>(std::min(options.chunk_bytes, largest)));
  if (options.stats != nullptr) options.stats->note_buffers(static_cast<int64_t>(chunk.size()));
  std::set<std::string> verified;
  for (const ManifestFile& f : files) {
    if (!wanted(f.name)) continue;
    STRATA_RETURN_IF_ERROR(verify_file(dir, f, chunk, options));
    verified.insert(f.name);
  }
  return verified;
}

}  // namespace

Status verify_checkpoint(const std::string& dir, const CheckpointReadOptions& options) {
  return verify_files(dir, options, [](const std::string&) { return true; }).status();
}

Status verify_checkpoint_files(const std::string& dir, const std::vector<std::string>& files,
                               const CheckpointReadOptions& options) {
  const std::set<std::string> want(files.begin(), files.end());
  STRATA_ASSIGN_OR_RETURN(
      std::set<std::string> verified,
      verify_files(dir, options, [&](const std::string& name) { return want.count(name) != 0; }));
  for (const std::string& f : files) {
    if (verified.count(f) == 0) return not_found("checkpoint " + dir + " lists no " + f);
  }
  return Status();
}

Result<std::string> resolve_checkpoint(const std::string& path) {
  if (fs::exists(fs::path(path) / "manifest.json")) return path;
  if (!fs::is_directory(path)) return not_found("checkpoint directory " + path + " does not exist");
  auto dirs = step_dirs(path);
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    if (fs::exists(fs::path(it->second) / "manifest.json")) return it->second;
  }
  return not_found("no complete checkpoint in " + path);
}

namespace {

// The model shape saved in config.json against the one asked for: invalid_argument naming the
// field and both values.
Status check_model_shape(const std::string& dir, const TrainConfig& cfg) {
  const std::string path = dir + "/config.json";
  STRATA_ASSIGN_OR_RETURN(std::string text, read_whole_file(path, "checkpoint file"));
  const nlohmann::json cj = nlohmann::json::parse(text, nullptr, false);
  if (cj.is_discarded()) return bad_format("checkpoint file " + path + " is not valid JSON");
  auto saved = parse_config(cj);
  if (!saved.ok()) {
    return bad_format("checkpoint config " + path + ": " + saved.status().message());
  }
  const ModelConfig &a = saved->model, &b = cfg.model;
  const std::pair<const char*, std::pair<int64_t, int64_t>> fields[] = {
      {"vocab_size", {a.vocab_size, b.vocab_size}},
      {"context_length", {a.context_length, b.context_length}},
      {"n_layer", {a.n_layer, b.n_layer}},
      {"n_head", {a.n_head, b.n_head}},
      {"n_embd", {a.n_embd, b.n_embd}}};
  for (const auto& [name, v] : fields) {
    if (v.first != v.second) {
      return invalid_argument("checkpoint " + dir + " has model." + name + " " +
                              std::to_string(v.first) + ", the config asks for " +
                              std::to_string(v.second));
    }
  }
  return Status();
}

Result<CheckpointMeta> read_trainer_state(const std::string& dir) {
  const std::string path = dir + "/trainer_state.json";
  STRATA_ASSIGN_OR_RETURN(std::string text, read_whole_file(path, "checkpoint file"));
  const nlohmann::json sj = nlohmann::json::parse(text, nullptr, false);
  CheckpointMeta meta;
  try {
    meta.step = sj.at("step").get<int64_t>();
    meta.adam_steps = sj.at("adam_steps").get<int64_t>();
    meta.data_position = sj.at("data_position").get<int64_t>();
    meta.seed = sj.at("seed").get<int64_t>();
    meta.schedule = sj.at("schedule").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    return bad_format("checkpoint file " + path + ": " + e.what());
  }
  return meta;
}

// One verified safetensors file of a checkpoint: its header and its bytes by range.
struct TensorFile {
  SafeTensorsHeader header;
  ReadOnlyFile file;
};

Result<TensorFile> open_tensor_file(const std::string& dir, const std::string& name,
                                    const CheckpointReadOptions& options) {
  const std::string path = dir + "/" + name;
  STRATA_ASSIGN_OR_RETURN(SafeTensorsHeader header, read_safetensors_header(path));
  STRATA_ASSIGN_OR_RETURN(ReadOnlyFile file, open_checkpoint_file(path, options));
  return TensorFile{std::move(header), std::move(file)};
}

// Host buffers for one slab's state, sized once for the largest slab and reused (Note [Checkpoint
// format]): master, m, v in Strata's layout and one transposed tensor as the file holds it (HF
// layout); tensors HF lays out as Strata does are read straight into place.
struct SlabBuffers {
  std::vector<float> master, m, v, staged;

  explicit SlabBuffers(const ParamLayout& layout) {
    int64_t slab = 0, tensor = 0;
    for (const Slab& s : layout.slabs) slab = std::max(slab, s.numel);
    for (int64_t i = 0; i < static_cast<int64_t>(layout.tensors.size()); ++i) {
      if (hf_tensor(layout, i).transposed) {
        tensor = std::max(tensor, layout.tensors[static_cast<size_t>(i)].numel());
      }
    }
    master.resize(static_cast<size_t>(slab));
    m.resize(master.size());
    v.resize(master.size());
    staged.resize(static_cast<size_t>(tensor));
  }
  int64_t bytes() const {
    return static_cast<int64_t>((3 * master.size() + staged.size()) * sizeof(float));
  }
};

// Tensor `h.name` (with `prefix`) of `src`, checked to be F32 of HF's shape, read into Strata's
// layout at `into`: straight there, or through `staged` when HF holds it transposed.
Status read_tensor(const std::string& dir, const TensorFile& src, const std::string& prefix,
                   const HfTensor& h, const ParamTensor& t, float* staged, float* into) {
  auto entry = src.header.f32_entry(prefix + h.name, h.shape);
  if (!entry.ok()) return bad_format("checkpoint " + dir + ": " + entry.status().message());
  float* dst = h.transposed ? staged : into;
  STRATA_RETURN_IF_ERROR(src.file.read_at(dst, (*entry)->bytes, (*entry)->offset));
  if (h.transposed) from_hf_layout(t, staged, into);
  return Status();
}

// Slab `si`'s master, m and v read from the two files into `buf` (padding zero).
Status read_slab(const std::string& dir, const ParamLayout& layout, size_t si,
                 const TensorFile& model, const TensorFile& optim, SlabBuffers& buf) {
  const Slab& s = layout.slabs[si];
  const auto n = static_cast<size_t>(s.numel);
  // The buffers held another slab, whose tensors may lie where this one has padding.
  std::fill_n(buf.master.begin(), n, 0.0f);
  std::fill_n(buf.m.begin(), n, 0.0f);
  std::fill_n(buf.v.begin(), n, 0.0f);
  for (int64_t i = s.first_tensor; i < s.first_tensor + s.tensor_count; ++i) {
    const ParamTensor& t = layout.tensors[static_cast<size_t>(i)];
    const HfTensor h = hf_tensor(layout, i);
    const int64_t at = t.offset - s.offset;
    float* staged = buf.staged.data();
    STRATA_RETURN_IF_ERROR(read_tensor(dir, model, "", h, t, staged, buf.master.data() + at));
    STRATA_RETURN_IF_ERROR(read_tensor(dir, optim, "exp_avg.", h, t, staged, buf.m.data() + at));
    STRATA_RETURN_IF_ERROR(read_tensor(dir, optim, "exp_avg_sq.", h, t, staged, buf.v.data() + at));
  }
  return Status();
}

}  // namespace

Result<CheckpointMeta> load_checkpoint(const std::string& dir, const TrainConfig& cfg,
                                       const SlabWriter& write,
                                       const CheckpointReadOptions& options) {
  // Pass 1: nothing is used until every file matches the manifest.
  STRATA_RETURN_IF_ERROR(verify_checkpoint(dir, options));
  STRATA_RETURN_IF_ERROR(check_model_shape(dir, cfg));
  STRATA_ASSIGN_OR_RETURN(CheckpointMeta meta, read_trainer_state(dir));

  // Pass 2: slab by slab, exactly the bytes of its tensors.
  STRATA_ASSIGN_OR_RETURN(TensorFile model, open_tensor_file(dir, "model.safetensors", options));
  STRATA_ASSIGN_OR_RETURN(TensorFile optim,
                          open_tensor_file(dir, "optimizer.safetensors", options));
  const ParamLayout layout = make_param_layout(cfg.model);
  SlabBuffers buf(layout);
  if (options.stats != nullptr) options.stats->note_buffers(buf.bytes());
  for (size_t si = 0; si < layout.slabs.size(); ++si) {
    STRATA_RETURN_IF_ERROR(read_slab(dir, layout, si, model, optim, buf));
    STRATA_RETURN_IF_ERROR(
        write(static_cast<int64_t>(si), buf.master.data(), buf.m.data(), buf.v.data()));
  }
  return meta;
}

}  // namespace strata
