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
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
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

  // One slab at a time: its state, then its tensors in HF layout, appended in file order. The
  // buffers are sized once for the largest slab and reused: fresh large allocations per slab
  // cost more in page faults than the copy itself.
  int64_t max_numel = 0;
  for (const Slab& s : layout.slabs) max_numel = std::max(max_numel, s.numel);
  const auto cap = static_cast<size_t>(max_numel);
  std::vector<float> master(cap), m(cap), v(cap);
  std::vector<float> mbuf(cap), obuf(2 * cap);  // this slab's bytes of each file
  for (size_t si = 0; si < layout.slabs.size(); ++si) {
    const Slab& s = layout.slabs[si];
    STRATA_RETURN_IF_ERROR(read(static_cast<int64_t>(si), master.data(), m.data(), v.data()));
    size_t mo = 0, oo = 0;
    for (int64_t i = s.first_tensor; i < s.first_tensor + s.tensor_count; ++i) {
      const ParamTensor& t = layout.tensors[static_cast<size_t>(i)];
      const int64_t at = t.offset - s.offset, n = t.numel();
      to_hf_layout(t, master.data() + at, mbuf.data() + mo);
      to_hf_layout(t, m.data() + at, obuf.data() + oo);
      to_hf_layout(t, v.data() + at, obuf.data() + oo + n);
      mo += static_cast<size_t>(n);
      oo += static_cast<size_t>(2 * n);
    }
    STRATA_RETURN_IF_ERROR(model.append(mbuf.data(), static_cast<int64_t>(mo * 4)));
    STRATA_RETURN_IF_ERROR(optim.append(obuf.data(), static_cast<int64_t>(oo * 4)));
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

// Reads the manifest of `dir`, then every file it lists once, checking its size and CRC32C, and
// hands each file's verified bytes to `use` (which may keep them by moving).
Status for_each_verified_file(const std::string& dir,
                              const std::function<Status(const std::string&, std::string&)>& use) {
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
  for (const auto& f : m["files"]) {
    const std::string name = f.value("name", ""), path = dir + "/" + name;
    if (!fs::exists(path)) return not_found("checkpoint file " + path + " is missing");
    STRATA_ASSIGN_OR_RETURN(std::string data, read_whole_file(path, "checkpoint file"));
    const int64_t want_bytes = f.value("bytes", int64_t{-1});
    if (static_cast<int64_t>(data.size()) != want_bytes) {
      return bad_format("checkpoint file " + path + " has " + std::to_string(data.size()) +
                        " bytes, the manifest says " + std::to_string(want_bytes));
    }
    const std::string crc = hex32(crc32c(data.data(), data.size()));
    if (crc != f.value("crc32c", "")) {
      return bad_format("checkpoint file " + path + " is corrupt: CRC32C " + crc +
                        ", the manifest says " + f.value("crc32c", ""));
    }
    STRATA_RETURN_IF_ERROR(use(name, data));
  }
  return Status();
}

}  // namespace

Status verify_checkpoint(const std::string& dir) {
  return for_each_verified_file(dir, [](const std::string&, std::string&) { return Status(); });
}

Result<SafeTensors> read_checkpoint_safetensors(const std::string& dir, const std::string& file) {
  SafeTensors out;
  bool found = false;
  STRATA_RETURN_IF_ERROR(
      for_each_verified_file(dir, [&](const std::string& name, std::string& bytes) -> Status {
        if (name != file) return Status();
        STRATA_ASSIGN_OR_RETURN(out, parse_safetensors(bytes, dir + "/" + name));
        found = true;
        return Status();
      }));
  if (!found) return not_found("checkpoint " + dir + " lists no " + file);
  return out;
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

Result<CheckpointMeta> load_checkpoint(const std::string& dir, const TrainConfig& cfg,
                                       const SlabWriter& write) {
  // Every file read once: checked against the manifest, then used from those bytes.
  std::string config_text, state_text;
  SafeTensors model, optim;
  STRATA_RETURN_IF_ERROR(
      for_each_verified_file(dir, [&](const std::string& name, std::string& bytes) -> Status {
        const std::string path = dir + "/" + name;
        if (name == "config.json") config_text = std::move(bytes);
        if (name == "trainer_state.json") state_text = std::move(bytes);
        if (name == "model.safetensors") {
          STRATA_ASSIGN_OR_RETURN(model, parse_safetensors(bytes, path));
        }
        if (name == "optimizer.safetensors") {
          STRATA_ASSIGN_OR_RETURN(optim, parse_safetensors(bytes, path));
        }
        return Status();
      }));
  const nlohmann::json cj = nlohmann::json::parse(config_text, nullptr, false);
  if (cj.is_discarded()) {
    return bad_format("checkpoint file " + dir + "/config.json is not valid JSON");
  }
  auto saved = parse_config(cj);
  if (!saved.ok()) {
    return bad_format("checkpoint config " + dir + "/config.json: " + saved.status().message());
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
  const nlohmann::json sj = nlohmann::json::parse(state_text, nullptr, false);
  CheckpointMeta meta;
  try {
    meta.step = sj.at("step").get<int64_t>();
    meta.adam_steps = sj.at("adam_steps").get<int64_t>();
    meta.data_position = sj.at("data_position").get<int64_t>();
    meta.seed = sj.at("seed").get<int64_t>();
    meta.schedule = sj.at("schedule").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    return bad_format("checkpoint file " + dir + "/trainer_state.json: " + e.what());
  }

  const ParamLayout layout = make_param_layout(cfg.model);
  for (size_t si = 0; si < layout.slabs.size(); ++si) {
    const Slab& s = layout.slabs[si];
    std::vector<float> master(static_cast<size_t>(s.numel), 0.0f), m(master.size(), 0.0f),
        v(master.size(), 0.0f);
    for (int64_t i = s.first_tensor; i < s.first_tensor + s.tensor_count; ++i) {
      const ParamTensor& t = layout.tensors[static_cast<size_t>(i)];
      const HfTensor h = hf_tensor(layout, i);
      const int64_t at = t.offset - s.offset;
      struct Source {
        const SafeTensors* file;
        std::string name;
        float* into;
      };
      for (const Source& src :
           {Source{&model, h.name, master.data()}, Source{&optim, "exp_avg." + h.name, m.data()},
            Source{&optim, "exp_avg_sq." + h.name, v.data()}}) {
        auto values = src.file->get_f32(src.name, h.shape);
        if (!values.ok()) {
          return bad_format("checkpoint " + dir + ": " + values.status().message());
        }
        from_hf_layout(t, values->data(), src.into + at);
      }
    }
    STRATA_RETURN_IF_ERROR(write(static_cast<int64_t>(si), master.data(), m.data(), v.data()));
  }
  return meta;
}

}  // namespace strata
