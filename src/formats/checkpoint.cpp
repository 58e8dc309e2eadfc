// Checkpoint save, verify and load; Note [Checkpoint format] in checkpoint.h.
#include "formats/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "core/config_bounds.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "core/slow_progress.h"
#include "formats/checkpoint_lineage.h"
#include "formats/checkpoint_publish.h"
#include "formats/checkpoint_shards.h"
#include "formats/checkpoint_tensors.h"
#include "formats/safetensors.h"
#include "io/crc32c.h"
#include "io/sequential_file.h"
#include "model/hf_names.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

constexpr int kVersion = 2;  // 1: both moments in optimizer.safetensors (still read)

// The safetensors header for tensors streamed in the order given (formats/safetensors.h).
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

// The three tensor files, slab by slab in the snapshot's capture order, each slab's bytes at
// the offset layout order puts them (Note [Asynchronous checkpoints] in model/state_snapshot.h).
// Appends their manifest entries; every slab is captured (or the gate cancelled by the caller).
Status write_state_files(IoEngine& engine, const std::string& dir, const ParamLayout& layout,
                         const StateSnapshot& snapshot, CheckpointSaveStats* stats,
                         std::vector<ManifestEntry>* manifest) {
  const nlohmann::ordered_json md = {{"format", kCheckpointFormat},
                                     {"version", std::to_string(kVersion)}};
  const auto names = state_file_names(kVersion);
  const auto n_tensors = static_cast<int64_t>(layout.tensors.size());
  const auto n_slabs = static_cast<int64_t>(layout.slabs.size());
  // Bytes of the tensors before tensor i, in every stream (f32, no padding between tensors).
  std::vector<int64_t> before(static_cast<size_t>(n_tensors) + 1, 0);
  for (int64_t i = 0; i < n_tensors; ++i) {
    before[static_cast<size_t>(i) + 1] =
        before[static_cast<size_t>(i)] + layout.tensors[static_cast<size_t>(i)].numel() * 4;
  }
  auto slab_bytes = [&](int64_t slab) {
    const Slab& s = layout.slabs[static_cast<size_t>(slab)];
    return before[static_cast<size_t>(s.first_tensor + s.tensor_count)] -
           before[static_cast<size_t>(s.first_tensor)];
  };
  std::vector<SequentialFile> files;
  std::array<int64_t, kStateStreamCount> header_bytes{};
  std::array<uint32_t, kStateStreamCount> header_crc{};
  for (int k = 0; k < kStateStreamCount; ++k) {
    std::vector<StreamedTensor> tensors;
    for (int64_t i = 0; i < n_tensors; ++i) {
      const HfTensor h = hf_tensor(layout, i);
      tensors.push_back({state_stream_prefix(static_cast<StateStream>(k)) + h.name, h.shape,
                         layout.tensors[static_cast<size_t>(i)].numel() * 4});
    }
    STRATA_ASSIGN_OR_RETURN(
        SequentialFile f,
        SequentialFile::create(engine, dir + "/" + names[static_cast<size_t>(k)]));
    const std::string header = safetensors_header(tensors, md);
    STRATA_RETURN_IF_ERROR(f.append(header.data(), static_cast<int64_t>(header.size())));
    header_bytes[static_cast<size_t>(k)] = f.size();
    header_crc[static_cast<size_t>(k)] = f.crc();
    files.push_back(std::move(f));
  }
  // Slab by slab as the snapshot makes them ready, piece by piece (Note [Slab pieces], Note
  // [Checkpoint tensor streams]); per stream and slab the CRC32C of its bytes.
  std::vector<std::array<uint32_t, kStateStreamCount>> slab_crc(static_cast<size_t>(n_slabs));
  StateFileWriter writer(layout, {&files[0], &files[1], &files[2]});
  // A save of tens of GB takes minutes (at a standstill or behind training): a line every few
  // seconds says how far it is.
  SlowProgress progress("writing checkpoint " + dir, n_slabs, "slabs");
  int64_t written = 0;
  for (;;) {
    STRATA_ASSIGN_OR_RETURN(const int64_t si, snapshot.gate->next_ready());
    if (si < 0) break;
    const Slab& s = layout.slabs[static_cast<size_t>(si)];
    for (int k = 0; k < kStateStreamCount; ++k) {
      files[static_cast<size_t>(k)].seek(header_bytes[static_cast<size_t>(k)] +
                                         before[static_cast<size_t>(s.first_tensor)]);
    }
    STRATA_RETURN_IF_ERROR(
        writer.write_slab(si, [&](const SlabPieceFn& take) { return snapshot.read(si, take); }));
    for (int k = 0; k < kStateStreamCount; ++k) {
      slab_crc[static_cast<size_t>(si)][static_cast<size_t>(k)] =
          files[static_cast<size_t>(k)].crc();
    }
    snapshot.gate->captured(si);
    progress.update(++written);
  }
  stats->buffer_bytes = writer.buffer_bytes();
  for (int k = 0; k < kStateStreamCount; ++k) {
    SequentialFile& f = files[static_cast<size_t>(k)];
    uint32_t crc = header_crc[static_cast<size_t>(k)];  // file order: header, then every slab
    for (int64_t si = 0; si < n_slabs; ++si) {
      crc = crc32c_combine(crc, slab_crc[static_cast<size_t>(si)][static_cast<size_t>(k)],
                           slab_bytes(si));
    }
    STRATA_RETURN_IF_ERROR(f.finish());
    manifest->push_back({names[static_cast<size_t>(k)], f.size(), crc});
  }
  return Status();
}

Status write_checkpoint_files(IoEngine& engine, const std::string& dir, const TrainConfig& cfg,
                              const CheckpointMeta& meta, const StateSnapshot& snapshot,
                              CheckpointSaveStats* stats) {
  const ParamLayout layout = make_param_layout(cfg.model, cfg.lora);
  std::vector<ManifestEntry> manifest;
  STRATA_RETURN_IF_ERROR(write_state_files(engine, dir, layout, snapshot, stats, &manifest));
  return write_checkpoint_meta(engine, dir, cfg, meta, kVersion, std::move(manifest),
                               nlohmann::json::object(), stats);
}

}  // namespace

std::vector<std::string> tokenizer_files_in(const std::string& dir) {
  std::vector<std::string> found;
  for (const char* name : kTokenizerFileNames) {
    std::error_code ec;
    if (fs::is_regular_file(fs::path(dir) / name, ec))
      found.push_back((fs::path(dir) / name).string());
  }
  return found;
}

std::vector<std::pair<int64_t, std::string>> checkpoint_step_dirs(const std::string& root) {
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

namespace {

// A checkpoint's JSON file, whole: a regular file (never waits on a FIFO) of at most 16 MiB (a
// manifest or state names a few files; a huge one is not ours and is not allocated).
Result<std::string> read_checkpoint_text(const std::string& path) {
  constexpr int64_t kMaxBytes = int64_t{16} << 20;
  STRATA_ASSIGN_OR_RETURN(ReadOnlyFile f, ReadOnlyFile::open(path, "checkpoint file"));
  if (f.size() > kMaxBytes) {
    return bad_format("checkpoint file " + path + " has " + std::to_string(f.size()) +
                      " bytes, more than a checkpoint's JSON files hold (" +
                      std::to_string(kMaxBytes) + ")");
  }
  std::string text(static_cast<size_t>(f.size()), '\0');
  STRATA_RETURN_IF_ERROR(f.read_at(text.data(), f.size(), 0));
  return text;
}

Result<nlohmann::json> read_json(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, read_checkpoint_text(path));
  // Nesting bounded (Note [Bounded JSON nesting]); a key twice is refused (Note [Duplicate keys]).
  return parse_json(text, "checkpoint file " + path, JsonSyntax{.unique_keys = true});
}

}  // namespace

namespace {

Result<CheckpointSaveStats> publish_checkpoint(IoEngine& engine, const std::string& root,
                                               const TrainConfig& cfg, const CheckpointMeta& meta,
                                               const StateSnapshot& snapshot, int64_t keep) {
  STRATA_ASSIGN_OR_RETURN(PendingSave pending, begin_checkpoint_save(root, meta.step, ::getpid()));
  if (pending.done) return pending.stats;
  const Status written =
      write_checkpoint_files(engine, pending.tmp, cfg, meta, snapshot, &pending.stats);
  return publish_checkpoint_save(std::move(pending), root, keep, written);
}

}  // namespace

Result<CheckpointSaveStats> save_checkpoint(IoEngine& engine, const std::string& root,
                                            const TrainConfig& cfg, const CheckpointMeta& meta,
                                            const SlabReader& read, int64_t keep) {
  const ParamLayout layout = make_param_layout(cfg.model, cfg.lora);
  std::vector<int64_t> order(layout.slabs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  return save_checkpoint(engine, root, cfg, meta,
                         StateSnapshot{std::make_shared<SnapshotGate>(order), read}, keep);
}

Result<CheckpointSaveStats> save_checkpoint(IoEngine& engine, const std::string& root,
                                            const TrainConfig& cfg, const CheckpointMeta& meta,
                                            const StateSnapshot& snapshot, int64_t keep) {
  Result<CheckpointSaveStats> saved = publish_checkpoint(engine, root, cfg, meta, snapshot, keep);
  // Whatever happened, training never waits on this snapshot again.
  if (!saved.ok() || !snapshot.gate->finished()) snapshot.gate->cancel();
  return saved;
}

namespace {

struct ManifestFile {
  std::string name;
  int64_t bytes = -1;
  std::string crc32c;  // 8 hex digits
};

struct Manifest {
  int version = 0;
  int64_t step = -1;  // -1: not given
  std::vector<ManifestFile> files;
  nlohmann::json shards;  // version 3's (Note [Sharded checkpoints])
};

// The manifest of `dir`: its format version and the files it lists.
// One "files" entry: a plain file name inside the checkpoint directory (never a path: a
// manifest must not make us read outside it), a size and an 8-hex-digit CRC32C.
Result<ManifestFile> manifest_file(const nlohmann::json& f, size_t i, const std::string& mpath) {
  const std::string where = "checkpoint manifest " + mpath + ": files[" + std::to_string(i) + "]";
  if (!f.is_object()) return bad_format(where + " is not an object");
  const auto name = f.find("name"), bytes = f.find("bytes"), crc = f.find("crc32c");
  if (name == f.end() || !name->is_string()) return bad_format(where + ".name is not a string");
  const std::string n = name->get<std::string>();
  if (n.empty() || n == "." || n == ".." || n.find('/') != std::string::npos ||
      n.find('\0') != std::string::npos) {
    return bad_format(where + ".name is not a file name in the checkpoint directory");
  }
  if (bytes == f.end() || !bytes->is_number_integer() || bytes->get<int64_t>() < 0) {
    return bad_format(where + ".bytes is not a non-negative integer");
  }
  if (crc == f.end() || !crc->is_string() || crc->get<std::string>().size() != 8 ||
      crc->get<std::string>().find_first_not_of("0123456789abcdef") != std::string::npos) {
    return bad_format(where + ".crc32c is not 8 lowercase hex digits");
  }
  return ManifestFile{n, bytes->get<int64_t>(), crc->get<std::string>()};
}

// The manifest of `dir`: its format version and the files it lists. Every field's type is
// checked before use (bad_format naming the file and the field).
Result<Manifest> read_manifest(const std::string& dir) {
  const std::string mpath = dir + "/manifest.json";
  if (!fs::exists(mpath)) {
    return not_found("checkpoint " + dir + " has no manifest.json (not a complete checkpoint)");
  }
  STRATA_ASSIGN_OR_RETURN(nlohmann::json m, read_json(mpath));
  const bool ours = m.is_object() && m.contains("format") && m["format"].is_string() &&
                    m["format"].get<std::string>() == kCheckpointFormat;
  if (!ours || !m.contains("files") || !m["files"].is_array()) {
    return bad_format("checkpoint manifest " + mpath + " is not a Strata checkpoint manifest");
  }
  Manifest out;
  const nlohmann::json& version = m["version"];
  if (!version.is_number_integer() || version.get<int64_t>() < 1 ||
      version.get<int64_t>() > kShardedCheckpointVersion) {
    return bad_format("checkpoint manifest " + mpath + " has a version other than 1 to " +
                      std::to_string(kShardedCheckpointVersion) + " (this build's)");
  }
  out.version = version.get<int>();
  if (const auto step = m.find("step"); step != m.end()) {
    if (!step->is_number_integer() || step->get<int64_t>() < 0 ||
        step->get<int64_t>() > kMaxSteps) {
      return bad_format("checkpoint manifest " + mpath + ": step must be an integer in [0, " +
                        std::to_string(kMaxSteps) + "], got " + json_preview(*step));
    }
    out.step = step->get<int64_t>();
  }
  if (out.version == kShardedCheckpointVersion) {
    if (!m.contains("shards")) return bad_format("checkpoint manifest " + mpath + " has no shards");
    out.shards = m["shards"];
  }
  const nlohmann::json& files = m["files"];
  for (size_t i = 0; i < files.size(); ++i) {
    STRATA_ASSIGN_OR_RETURN(ManifestFile f, manifest_file(files[i], i, mpath));
    out.files.push_back(std::move(f));
  }
  return out;
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
  if (crc32c_hex(crc) != want.crc32c) {
    return bad_format("checkpoint file " + path + " is corrupt: CRC32C " + crc32c_hex(crc) +
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
  STRATA_ASSIGN_OR_RETURN(Manifest manifest, read_manifest(dir));
  const std::vector<ManifestFile>& files = manifest.files;
  int64_t largest = 1;
  for (const ManifestFile& f : files) {
    if (wanted(f.name)) largest = std::max(largest, f.bytes);
  }
  std::vector<uint8_t> chunk(static_cast<size_t>(std::min(options.chunk_bytes, largest)));
  if (options.stats != nullptr) options.stats->note_buffers(static_cast<int64_t>(chunk.size()));
  std::set<std::string> verified;
  SlowProgress progress("verifying checkpoint " + dir, static_cast<int64_t>(files.size()), "files");
  for (const ManifestFile& f : files) {
    progress.update(static_cast<int64_t>(verified.size()));
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
  auto dirs = checkpoint_step_dirs(path);
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    if (fs::exists(fs::path(it->second) / "manifest.json")) return it->second;
  }
  return not_found("no complete checkpoint in " + path);
}

namespace {

// The model shape saved in config.json against the one asked for: invalid_argument naming the
// field and both values.
Status check_model_shape(const std::string& dir, const TrainConfig& cfg) {
  STRATA_ASSIGN_OR_RETURN(TrainConfig saved, read_checkpoint_config(dir));
  if (auto d = model_difference(saved.model, cfg.model)) {
    return invalid_argument("checkpoint " + dir + " has " + d->key + " " + d->a +
                            ", the config asks for " + d->b);
  }
  return Status();
}

// The step a checkpoint is at, said three times: by its directory's name (when it is a
// step-NNNNNNNN), its manifest and trainer_state.json. A directory renamed or copied over another
// step's would resume at a step its name does not say: refused naming both.
Status check_checkpoint_step(const std::string& dir, const Manifest& manifest,
                             const CheckpointMeta& meta) {
  if (manifest.step >= 0 && manifest.step != meta.step) {
    return bad_format("checkpoint " + dir + ": manifest.json says step " +
                      std::to_string(manifest.step) + ", trainer_state.json step " +
                      std::to_string(meta.step));
  }
  std::string path = dir;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const std::string base = fs::path(path).filename().string();
  char* end = nullptr;
  if (base.rfind("step-", 0) != 0 || base.size() <= 5) return Status();
  const long long named = std::strtoll(base.c_str() + 5, &end, 10);
  if (*end != '\0' || named == meta.step) return Status();
  return bad_format("checkpoint " + dir + " is named for step " + std::to_string(named) +
                    " but holds step " + std::to_string(meta.step) +
                    " (its manifest and trainer_state.json): renamed or copied over another?");
}

}  // namespace

Result<int> checkpoint_version(const std::string& dir) {
  STRATA_ASSIGN_OR_RETURN(Manifest manifest, read_manifest(dir));
  return manifest.version;
}

Result<TrainConfig> read_checkpoint_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  STRATA_ASSIGN_OR_RETURN(std::string text, read_checkpoint_text(path));
  STRATA_ASSIGN_OR_RETURN(nlohmann::json cj, parse_json(text, "checkpoint file " + path));
  auto saved = parse_config(cj);
  if (!saved.ok()) {
    return bad_format("checkpoint config " + path + ": " + saved.status().message());
  }
  return *saved;
}

// Every field is checked before the trainer sees it: a negative step trained with a negative
// learning rate, a negative adam_steps failed a CHECK, and the run id names a directory (Note
// [Checkpoint lineage]). Fields other than these are ignored (later versions may add some).
Result<CheckpointMeta> read_trainer_state(const std::string& dir) {
  const std::string path = dir + "/trainer_state.json";
  const std::string what = "checkpoint file " + path;
  STRATA_ASSIGN_OR_RETURN(std::string text, read_checkpoint_text(path));
  // Note [Bounded JSON nesting].
  STRATA_ASSIGN_OR_RETURN(nlohmann::json sj, parse_json(text, what));
  if (!sj.is_object()) return bad_format(what + " is not a JSON object");
  constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
  auto integer = [&](const char* key, int64_t lo, int64_t hi) -> Result<int64_t> {
    const auto it = sj.find(key);
    if (it == sj.end()) return bad_format(what + " has no " + key);
    const bool fits =
        it->is_number_integer() &&
        (!it->is_number_unsigned() || it->get<uint64_t>() <= static_cast<uint64_t>(kInt64Max));
    const int64_t v = fits ? it->get<int64_t>() : 0;
    if (!fits || v < lo || v > hi) {
      return bad_format(what + ": " + key + " must be an integer in [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "], got " + json_preview(*it));
    }
    return v;
  };
  CheckpointMeta meta;
  STRATA_ASSIGN_OR_RETURN(meta.step, integer("step", 0, kMaxSteps));
  // Updates applied: one per step, none for a skipped one.
  STRATA_ASSIGN_OR_RETURN(meta.adam_steps, integer("adam_steps", 0, meta.step));
  STRATA_ASSIGN_OR_RETURN(meta.data_position, integer("data_position", 0, kInt64Max));
  STRATA_ASSIGN_OR_RETURN(meta.seed,
                          integer("seed", std::numeric_limits<int64_t>::min(), kInt64Max));
  const auto schedule = sj.find("schedule");
  if (schedule == sj.end() || !schedule->is_string()) {
    return bad_format(what + ": schedule must be a schedule's name, got " +
                      (schedule == sj.end() ? std::string("nothing") : json_preview(*schedule)));
  }
  meta.schedule = schedule->get<std::string>();
  // Names are short: a long string is cut in the message, and is no name either.
  auto known = parse_enum<Schedule>("schedule", meta.schedule.substr(0, 32));
  if (!known.ok()) {
    return bad_format(what + ": " + known.status().message());
  }
  // Run ids (absent before them) are new_run_id's 16 hex digits: one becomes part of a directory
  // name when its checkpoints are moved aside, so nothing else may pass.
  auto is_run_id = [](const nlohmann::json& v) {
    if (!v.is_string()) return false;
    const std::string& s = v.get_ref<const std::string&>();
    return s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
  };
  if (const auto id = sj.find("run_id"); id != sj.end()) {
    if (!is_run_id(*id)) {
      return bad_format(what + ": run_id must be 16 hex digits, got " + json_preview(*id));
    }
    meta.run_id = id->get<std::string>();
  }
  if (const auto line = sj.find("lineage"); line != sj.end()) {
    if (!line->is_array() || !std::all_of(line->begin(), line->end(), is_run_id)) {
      return bad_format(what + ": lineage must be a list of run ids (16 hex digits), got " +
                        json_preview(*line));
    }
    meta.lineage = line->get<std::vector<std::string>>();
  }
  if (const auto base = sj.find("base_model"); base != sj.end() && !base->is_null()) {
    const auto path = base->is_object() ? base->find("path") : base->end();
    const auto config = base->is_object() ? base->find("config") : base->end();
    const auto generation = base->is_object() ? base->find("generation_config") : base->end();
    if (path == base->end() || !path->is_string() || config == base->end() ||
        !config->is_object() || (generation != base->end() && !generation->is_object())) {
      return bad_format(what +
                        ": base_model must be {\"path\": a string, \"config\": an object}, got " +
                        json_preview(*base));
    }
    meta.base_model = *base;
  }
  return meta;
}

Result<CheckpointHead> read_checkpoint_head(const std::string& dir, const TrainConfig& cfg) {
  STRATA_RETURN_IF_ERROR(verify_checkpoint_files(dir, {"config.json", "trainer_state.json"}));
  STRATA_ASSIGN_OR_RETURN(Manifest manifest, read_manifest(dir));
  STRATA_RETURN_IF_ERROR(check_model_shape(dir, cfg));
  CheckpointHead head;
  STRATA_ASSIGN_OR_RETURN(head.config, read_checkpoint_config(dir));
  STRATA_ASSIGN_OR_RETURN(head.meta, read_trainer_state(dir));
  STRATA_RETURN_IF_ERROR(check_checkpoint_step(dir, manifest, head.meta));
  if (manifest.version == kShardedCheckpointVersion) {
    const auto ranks = manifest.shards.find("ranks");
    if (ranks == manifest.shards.end() || !ranks->is_number_integer() ||
        ranks->get<int64_t>() < 1 || ranks->get<int64_t>() > 65536) {
      return bad_format("checkpoint " + dir + ": its manifest's shards.ranks is not 1 to 65536");
    }
    head.ranks = ranks->get<int64_t>();
  }
  return head;
}

Result<std::unique_ptr<StateSource>> open_checkpoint_state(const std::string& dir,
                                                           const TrainConfig& cfg,
                                                           CheckpointMeta* meta,
                                                           const CheckpointReadOptions& options) {
  // Pass 1: nothing is used until every file matches the manifest.
  STRATA_RETURN_IF_ERROR(verify_checkpoint(dir, options));
  STRATA_ASSIGN_OR_RETURN(Manifest manifest, read_manifest(dir));
  const bool sharded = manifest.version == kShardedCheckpointVersion;
  std::vector<std::string> needed = {"config.json", "trainer_state.json"};
  if (!sharded) {
    for (const std::string& name : state_file_names(manifest.version)) needed.push_back(name);
  }
  for (const std::string& name : needed) {
    const bool listed = std::any_of(manifest.files.begin(), manifest.files.end(),
                                    [&](const ManifestFile& f) { return f.name == name; });
    if (!listed) return bad_format("checkpoint " + dir + ": its manifest does not list " + name);
  }
  STRATA_RETURN_IF_ERROR(check_model_shape(dir, cfg));
  STRATA_ASSIGN_OR_RETURN(*meta, read_trainer_state(dir));

  const ParamLayout layout = make_param_layout(cfg.model, cfg.lora);
  ReadStats* reads = options.stats != nullptr ? &options.stats->reads : nullptr;
  if (!sharded) {
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<StateFileReader> reader,
                            StateFileReader::open(dir, layout, manifest.version, reads));
    return std::unique_ptr<StateSource>(std::move(reader));
  }
  std::vector<std::string> verified;  // the files pass 1 checked
  for (const ManifestFile& f : manifest.files) verified.push_back(f.name);
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<ShardedStateReader> reader,
                          ShardedStateReader::open(dir, layout, manifest.shards, verified, reads));
  return std::unique_ptr<StateSource>(std::move(reader));
}

Result<CheckpointMeta> load_checkpoint(const std::string& dir, const TrainConfig& cfg,
                                       const SlabWriter& write,
                                       const CheckpointReadOptions& options) {
  CheckpointMeta meta;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<StateSource> source,
                          open_checkpoint_state(dir, cfg, &meta, options));
  // Pass 2: slab by slab, piece by piece, exactly the bytes of each piece's tensors.
  const ParamLayout layout = make_param_layout(cfg.model, cfg.lora);
  SlowProgress progress("loading checkpoint " + dir, static_cast<int64_t>(layout.slabs.size()),
                        "slabs");
  for (int64_t si = 0; si < static_cast<int64_t>(layout.slabs.size()); ++si) {
    progress.update(si);
    STRATA_RETURN_IF_ERROR(write(si, [&](const SlabPiece& p) { return source->fill(si, p); }));
  }
  if (options.stats != nullptr) options.stats->note_buffers(source->buffer_bytes());
  return meta;
}

}  // namespace strata
