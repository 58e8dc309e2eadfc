// Writing and publishing a checkpoint's directory; formats/checkpoint_publish.h.
#include "formats/checkpoint_publish.h"

#include <cstdio>
#include <filesystem>
#include <utility>

#include "formats/checkpoint_lineage.h"
#include "io/sequential_file.h"

namespace strata {

namespace fs = std::filesystem;

std::string checkpoint_step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

std::string checkpoint_step_dir(const std::string& root, int64_t step) {
  return (fs::path(root) / checkpoint_step_name(step)).string();
}

std::string checkpoint_tmp_dir(const std::string& root, int64_t step, long pid) {
  return (fs::path(root) / (".tmp-" + checkpoint_step_name(step) + "-" + std::to_string(pid)))
      .string();
}

std::string crc32c_hex(uint32_t crc) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

namespace {

Status write_text(IoEngine& engine, const std::string& dir, const std::string& name,
                  const std::string& text, std::vector<ManifestEntry>* manifest) {
  STRATA_ASSIGN_OR_RETURN(SequentialFile f, SequentialFile::create(engine, dir + "/" + name));
  STRATA_RETURN_IF_ERROR(f.append(text.data(), static_cast<int64_t>(text.size())));
  STRATA_RETURN_IF_ERROR(f.finish());
  if (manifest != nullptr) manifest->push_back({name, f.size(), f.crc()});
  return Status();
}

}  // namespace

Status write_checkpoint_meta(IoEngine& engine, const std::string& dir, const TrainConfig& cfg,
                             const CheckpointMeta& meta, int version,
                             std::vector<ManifestEntry> files, const nlohmann::json& extra,
                             CheckpointSaveStats* stats) {
  STRATA_RETURN_IF_ERROR(
      write_text(engine, dir, "config.json", config_to_json(cfg).dump(2) + "\n", &files));
  nlohmann::json state = {{"step", meta.step},
                          {"adam_steps", meta.adam_steps},
                          {"data_position", meta.data_position},
                          {"seed", meta.seed},
                          {"schedule", meta.schedule}};
  if (!meta.run_id.empty()) state["run_id"] = meta.run_id;
  if (!meta.lineage.empty()) state["lineage"] = meta.lineage;
  if (!meta.base_model.is_null()) state["base_model"] = meta.base_model;
  for (const std::string& from : meta.tokenizer_files) {  // Note [Checkpoint tokenizer]
    STRATA_ASSIGN_OR_RETURN(const std::string bytes, read_whole_file(from, "tokenizer file"));
    STRATA_RETURN_IF_ERROR(
        write_text(engine, dir, fs::path(from).filename().string(), bytes, &files));
  }
  STRATA_RETURN_IF_ERROR(
      write_text(engine, dir, "trainer_state.json", state.dump(2) + "\n", &files));
  nlohmann::json listed = nlohmann::json::array();
  for (const ManifestEntry& e : files) {
    listed.push_back({{"name", e.name}, {"bytes", e.bytes}, {"crc32c", crc32c_hex(e.crc)}});
    stats->bytes += e.bytes;
  }
  nlohmann::json mf = {
      {"format", kCheckpointFormat}, {"version", version}, {"step", meta.step}, {"files", listed}};
  for (const auto& [key, value] : extra.items()) mf[key] = value;
  const std::string text = mf.dump(2) + "\n";
  stats->bytes += static_cast<int64_t>(text.size());
  return write_text(engine, dir, "manifest.json", text, nullptr);
}

Result<PendingSave> begin_checkpoint_save(const std::string& root, int64_t step, long pid) {
  PendingSave p;
  p.t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return io_error("cannot create checkpoint directory " + root + ": " + ec.message());
  // Leftovers of saves that a crash interrupted.
  for (const auto& e : fs::directory_iterator(root, ec)) {
    // (never a live save's: Note [Checkpoint lineage])
    if (is_stale_save_dir(e.path().filename().string())) fs::remove_all(e.path(), ec);
  }
  p.stats.dir = checkpoint_step_dir(root, step);
  p.done = fs::exists(fs::path(p.stats.dir) / "manifest.json");
  if (p.done) return p;
  p.tmp = checkpoint_tmp_dir(root, step, pid);
  fs::remove_all(p.tmp, ec);
  p.scratch = ScratchFile(p.tmp);
  fs::create_directory(p.tmp, ec);
  if (ec) return io_error("cannot create " + p.tmp + ": " + ec.message());
  return p;
}

Result<CheckpointSaveStats> publish_checkpoint_save(PendingSave pending, const std::string& root,
                                                    int64_t keep, Status written) {
  CheckpointSaveStats& stats = pending.stats;
  std::error_code ec;
  Status st = std::move(written);
  if (st.ok()) st = fsync_path(pending.tmp);
  if (st.ok()) {
    fs::rename(pending.tmp, stats.dir, ec);
    if (ec) st = io_error("cannot publish checkpoint " + stats.dir + ": " + ec.message());
  }
  if (!st.ok()) {
    fs::remove_all(pending.tmp, ec);
    return Status(st.code(), "checkpoint " + stats.dir + " not written: " + st.message());
  }
  STRATA_RETURN_IF_ERROR(fsync_path(root));
  if (keep > 0) {
    auto dirs = checkpoint_step_dirs(root);
    for (size_t i = 0; i + static_cast<size_t>(keep) < dirs.size(); ++i) {
      fs::remove_all(dirs[i].second, ec);
    }
  }
  stats.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - pending.t0).count();
  return stats;
}

}  // namespace strata
