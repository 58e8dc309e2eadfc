// Where a run's state comes from (--resume, --init-from) and goes to (checkpoints, at a
// standstill or behind training: Note [Asynchronous checkpoints]).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/train_run.h"
#include "core/format.h"
#include "core/log.h"
#include "formats/checkpoint.h"
#include "formats/checkpoint_lineage.h"
#include "formats/checkpoint_shards.h"
#include "formats/hf_export.h"
#include "formats/hf_import.h"

namespace strata::cli {

namespace {

// The checkpoint metadata at the boundary after `steps_done` steps.
CheckpointMeta checkpoint_meta(const TrainRun& run, int64_t steps_done) {
  CheckpointMeta meta;
  meta.step = steps_done;
  meta.adam_steps = run.trainer->adam_steps();
  meta.data_position = run.loader->position();
  meta.seed = run.cfg.seed;
  meta.schedule = enum_name(run.cfg.schedule);
  meta.run_id = run.lineage.back();
  meta.lineage = run.lineage;
  meta.base_model = run.base_model;
  meta.tokenizer_files = run.tokenizer_files;
  return meta;
}

void note_saved(const CheckpointSaveStats& saved, const CheckpointReport& r, Progress& progress) {
  char line[320];
  if (r.behind) {
    std::snprintf(line, sizeof line,
                  "checkpoint %s: %s in %.3f s behind training (training stalled %.3f s)",
                  saved.dir.c_str(), format_bytes(saved.bytes).c_str(), r.write_s, r.stall_s);
  } else {
    std::snprintf(line, sizeof line, "checkpoint %s: %s in %.3f s (training stalled)",
                  saved.dir.c_str(), format_bytes(saved.bytes).c_str(), saved.seconds);
  }
  progress.note(line);
}

// --allow-changes KEY[,KEY]: keys of the config's field table.
Result<std::vector<std::string>> allowed_changes(const ParsedArgs& a) {
  std::vector<std::string> keys;
  if (!a.has("allow-changes")) return keys;
  if (!a.has("resume")) {
    return invalid_argument(
        "--allow-changes needs --resume DIR: it names fields a resumed run "
        "may change");
  }
  const std::string list = a.get("allow-changes");
  for (size_t start = 0; start <= list.size();) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string key = list.substr(start, comma - start);
    if (!is_config_key(key)) {
      return invalid_argument("--allow-changes: '" + excerpt(key) +
                              "' is not a config key (e.g. train.batch_size)");
    }
    keys.push_back(key);
    start = comma + 1;
  }
  return keys;
}

// Note [Resuming with changed fields]: the fields the config changes from the checkpoint's, each
// logged; refused (one line naming them all and the flag) when one moves the data stream and
// --allow-changes does not name it.
Status check_changes(const std::string& dir, const TrainConfig& saved, const TrainConfig& cfg,
                     const std::vector<std::string>& allowed) {
  std::string refused, keys;
  for (const FieldDifference& d : data_stream_changes(saved, cfg)) {
    if (std::find(allowed.begin(), allowed.end(), d.key) != allowed.end()) continue;
    refused += (refused.empty() ? "" : ", ") + d.key + " " + d.a + " -> " + d.b;
    keys += (keys.empty() ? "" : ",") + d.key;
  }
  // Which tensors train is the checkpoint's shape, never a change to allow.
  for (const FieldDifference& d : config_differences(saved, cfg)) {
    if (d.key != "lora.rank" && d.key != "lora.targets" && d.key != "lora.modules_to_save")
      continue;
    return invalid_argument("resuming " + dir + " with " + d.key + " " + d.a + " -> " + d.b +
                            " would change which tensors train; a checkpoint resumes with its "
                            "own adapters (start a new run with --init-from to change them)");
  }
  if (!refused.empty()) {
    return invalid_argument("resuming " + dir + " with " + refused +
                            " would read other tokens than the checkpoint's run did; keep the "
                            "checkpoint's value, or pass --allow-changes " +
                            keys);
  }
  for (const FieldDifference& d : config_differences(saved, cfg)) {
    log_info("changed since the checkpoint: " + d.key + " " + d.a + " -> " + d.b);
  }
  if (saved.ranks != cfg.ranks) {
    log_info("changed since the checkpoint: ranks " + std::to_string(saved.ranks) + " -> " +
             std::to_string(cfg.ranks));
  }
  return Status::ok_status();
}

}  // namespace

std::optional<SetupError> check_resume(const ParsedArgs& a, TrainRun& run) {
  auto allowed = allowed_changes(a);
  if (!allowed.ok()) return SetupError{allowed.status().message()};
  if (run.ckpt.resume.empty()) return std::nullopt;
  auto dir = resolve_checkpoint(run.ckpt.resume);
  if (!dir.ok())
    return SetupError{dir.status().message(), exit_status_for(dir.status(), Stage::before_work)};
  auto head = read_checkpoint_head(*dir, run.cfg);
  if (!head.ok())
    return SetupError{head.status().message(), exit_status_for(head.status(), Stage::before_work)};
  const int64_t step = head->meta.step;
  if (step >= run.cfg.steps) {
    return SetupError{"checkpoint " + *dir + " is at step " + std::to_string(step) +
                      " and train.steps is " + std::to_string(run.cfg.steps) +
                      ": nothing to train (raise train.steps above " + std::to_string(step) + ")"};
  }
  TrainConfig saved = head->config;
  saved.ranks = static_cast<int32_t>(head->ranks);
  Status changes = check_changes(*dir, saved, run.cfg, *allowed);
  if (!changes.ok()) return SetupError{changes.message()};
  run.ckpt.resume_dir = *dir;
  return std::nullopt;
}

Result<int64_t> resume(TrainRun& run) {
  // check_resume's checkpoint: the one whose config and step it checked.
  STRATA_ASSIGN_OR_RETURN(std::string dir, run.ckpt.resume_dir.empty()
                                               ? resolve_checkpoint(run.ckpt.resume)
                                               : Result<std::string>(run.ckpt.resume_dir));
  auto meta = load_checkpoint(dir, run.cfg, [&](int64_t slab, const SlabPieceFn& fill) {
    return run.trainer->write_slab_pieces(slab, fill);
  });
  if (!meta.ok()) return meta.status();
  Status pos = run.loader->set_position(meta->data_position);
  if (!pos.ok()) return invalid_argument("checkpoint " + dir + ": " + pos.message());
  run.trainer->set_progress(meta->step, meta->adam_steps);
  log_info("resumed from " + dir + " at step " + std::to_string(meta->step));
  // Note [Checkpoint lineage]: this run continues the checkpoint's line.
  run.base_model = meta->base_model;  // Note [Base model]: the line keeps its base
  // Note [Checkpoint tokenizer]: the checkpoint's copy goes on, else its base's files.
  run.tokenizer_files = tokenizer_files_in(dir);
  if (run.tokenizer_files.empty()) run.tokenizer_files = base_tokenizer_files(run.base_model);
  std::vector<std::string> lineage = meta->lineage;
  lineage.push_back(run.lineage.back());
  run.lineage = std::move(lineage);
  if (run.ckpt.save_every > 0 && writes_outputs(run)) {
    STRATA_ASSIGN_OR_RETURN(auto moved,
                            claim_checkpoint_root(run.ckpt.dir, run.lineage, meta->step));
    for (const std::string& m : moved) {
      log_info("checkpoint of another line moved aside (Note [Checkpoint lineage]): " + m);
    }
  }
  return meta->step;
}

namespace {

// Note [Base model]: what the checkpoints of a run imported from plan.dir record of it.
Result<nlohmann::json> base_model_of(const HfImportPlan& plan) {
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::absolute(plan.dir, ec).lexically_normal();
  STRATA_ASSIGN_OR_RETURN(nlohmann::json config, read_json_file(plan.config_path));
  nlohmann::json base = {{"path", ec ? plan.dir : dir.string()}, {"config", std::move(config)}};
  const std::string generation =
      (std::filesystem::path(plan.dir) / "generation_config.json").string();
  if (std::filesystem::exists(generation, ec)) {
    auto g = read_json_file(generation);
    if (g.ok() && g->is_object()) {
      base["generation_config"] = std::move(*g);
    } else {
      log_warn(generation + " is not a JSON object; an export will write its own from config.json");
    }
  }
  return base;
}

}  // namespace

Status init_from(TrainRun& run) {
  const HfImportPlan& plan = *run.import;
  STRATA_ASSIGN_OR_RETURN(run.base_model, base_model_of(plan));
  run.tokenizer_files = base_tokenizer_files(run.base_model);  // Note [Checkpoint tokenizer]
  STRATA_ASSIGN_OR_RETURN(HfImportStats st,
                          import_hf_weights(
                              plan, run.trainer->layout(),
                              [&](int64_t slab, const SlabPieceFn& fill) {
                                return run.trainer->write_slab_pieces(slab, fill);
                              },
                              HfImportOptions{.seed = static_cast<uint64_t>(run.cfg.seed)}));
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.2f s", st.seconds);
  std::string line = "imported " + plan.dir + " (" + enum_name(plan.model.arch) +
                     "): " + std::to_string(st.tensors) + " tensors, " +
                     human_count(static_cast<double>(st.parameters)) + " parameters, " +
                     plan.dtypes + ", " + format_bytes(st.bytes_read) + " read in " + seconds;
  if (!plan.ignored.empty()) {
    line += "; ignored " + std::to_string(plan.ignored.size()) + " tensors HF's loader ignores too";
  }
  log_info(line + "; the optimizer starts at step 0");
  return Status();
}

Result<CheckpointReport> save_at_standstill(TrainRun& run, int64_t steps_done, Progress& progress) {
  Communicator& world = *run.world;
  if (world.size() > 1) {
    const SlabReader share = [&](int64_t slab, const SlabPieceFn& take) {
      return run.trainer->read_shard_pieces(slab, world.rank(), world.size(), take);
    };
    STRATA_ASSIGN_OR_RETURN(
        auto saved,
        save_sharded_checkpoint(*run.ckpt_engine, run.ckpt.dir, run.cfg,
                                checkpoint_meta(run, steps_done), share, run.ckpt.keep, world));
    const CheckpointReport r{steps_done, saved.seconds, saved.seconds, false};
    if (writes_outputs(run)) note_saved(saved, r, progress);
    return r;
  }
  STRATA_ASSIGN_OR_RETURN(
      auto saved, save_checkpoint(
                      *run.ckpt_engine, run.ckpt.dir, run.cfg, checkpoint_meta(run, steps_done),
                      [&](int64_t slab, const SlabPieceFn& take) {
                        return run.trainer->read_slab_pieces(slab, take);
                      },
                      run.ckpt.keep));
  const CheckpointReport r{steps_done, saved.seconds, saved.seconds, false};
  note_saved(saved, r, progress);
  return r;
}

Result<bool> start_save_behind(TrainRun& run, int64_t steps_done) {
  if (run.world->size() > 1) return false;  // every rank writes its share, at a standstill
  const auto t0 = std::chrono::steady_clock::now();
  auto snapshot = run.trainer->begin_snapshot();
  if (!snapshot.ok()) {
    if (snapshot.status().code() == ErrorCode::unavailable) return false;
    return snapshot.status();
  }
  const double boundary_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  run.background.start(snapshot->gate, steps_done, boundary_s,
                       [&run, meta = checkpoint_meta(run, steps_done), snap = *snapshot] {
                         return save_checkpoint(*run.ckpt_engine, run.ckpt.dir, run.cfg, meta, snap,
                                                run.ckpt.keep);
                       });
  return true;
}

Result<CheckpointReport> collect_save(TrainRun& run, Progress& progress) {
  STRATA_ASSIGN_OR_RETURN(CollectedSave c, run.background.collect());
  const CheckpointReport r{c.step, c.stall_s, c.stats.seconds, true};
  note_saved(c.stats, r, progress);
  return r;
}

bool checkpoint_due(const TrainRun& run, int64_t done) {
  const int64_t every = run.ckpt.save_every;
  return every > 0 && (done % every == 0 || done == run.cfg.steps);
}

}  // namespace strata::cli
