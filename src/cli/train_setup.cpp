// `strata train`'s set-up: the flags checked, the config (with --init-from, --auto, the ranks),
// the data, the output files and the checkpoint directory, then the device and the trainer.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/train_run.h"
#include "core/format.h"
#include "core/json_util.h"
#include "core/log.h"
#include "core/output_file.h"
#include "data/byte_tokenizer.h"
#include "data/example_rows.h"
#include "data/synthetic_corpus.h"
#include "data/token_paths.h"
#include "formats/checkpoint.h"
#include "io/configured_engine.h"
#include "io/crc32c.h"
#include "io/storage_dirs.h"
#include "model/hf_config.h"
#include "model/lora.h"
#include "planner/planner.h"

namespace strata::cli {

namespace {

// Size of the generated corpus behind the embedded default: enough that a minute of training
// does not see the same text twice.
constexpr int64_t kEmbeddedCorpusBytes = 4 << 20;

// Size of the generated held-out text behind data.val "embedded" (another seed than the training
// corpus, so no sentence of it was trained on by chance of the generator).
constexpr int64_t kEmbeddedValBytes = 256 << 10;

}  // namespace

// The tokens of `source` (data.train or data.val): "embedded" generates `embedded_bytes` of text
// from `seed`; anything else names token files in data.format (Note [Token file lists]).
Result<TrainData> load_token_data(const TrainConfig& cfg, const std::string& source,
                                  const std::string& field, int64_t embedded_bytes, uint64_t seed) {
  TrainData d;
  if (source == "embedded") {
    if (cfg.model.vocab_size < 256) {
      return invalid_argument("model.vocab_size " + std::to_string(cfg.model.vocab_size) +
                              " is below 256, which the embedded byte-level corpus needs");
    }
    d.owned = byte_tokenize(synthetic_corpus(embedded_bytes, seed));
    d.size = static_cast<int64_t>(d.owned.size());
    d.name = "embedded corpus";
    d.shards.push_back({TokenView(d.owned.data(), d.size), d.name});
    return d;
  }
  STRATA_ASSIGN_OR_RETURN(std::vector<std::string> paths, expand_token_paths(source, field));
  for (const std::string& path : paths) {
    STRATA_ASSIGN_OR_RETURN(TokenFile f, TokenFile::open(path, cfg.data_format));
    STRATA_RETURN_IF_ERROR(check_token_range(f, cfg.model.vocab_size));
    d.size += f.size();
    d.trained += f.size();
    std::optional<TokenFile> mask;
    std::error_code ec;
    if (std::filesystem::exists(mask_path_for(path), ec)) {
      STRATA_ASSIGN_OR_RETURN(mask, TokenFile::open_mask(mask_path_for(path), f.size()));
      d.trained -= f.size() - mask->mask_ones();
    }
    d.files.push_back(std::move(f));
    d.masks.push_back(std::move(mask));
  }
  for (size_t k = 0; k < paths.size(); ++k) {  // the files moved no more: their views hold
    d.shards.push_back({d.files[k].view(), "data file " + paths[k],
                        d.masks[k] ? d.masks[k]->view() : TokenView()});
  }
  d.name = paths.size() == 1 ? paths.front()
                             : std::to_string(paths.size()) + " files (" + paths.front() + " ... " +
                                   paths.back() + ")";
  return d;
}

Result<TrainData> load_val_data(const TrainConfig& cfg) {
  return load_token_data(cfg, cfg.data_val, "data.val", kEmbeddedValBytes, 20240521);
}

namespace {

// The checkpoint flags; one that is bad or lacks the flag it needs is refused naming it.
Result<CheckpointOptions> checkpoint_options(const ParsedArgs& a) {
  CheckpointOptions o;
  if (a.has("save-every")) {
    STRATA_ASSIGN_OR_RETURN(o.save_every, int_flag(a, "save-every", false));
    if (!a.has("checkpoint-dir")) return invalid_argument("--save-every needs --checkpoint-dir");
  } else if (a.has("checkpoint-dir") || a.has("keep")) {
    return invalid_argument("--checkpoint-dir and --keep need --save-every N");
  }
  o.dir = a.get("checkpoint-dir");
  if (a.has("keep")) {
    STRATA_ASSIGN_OR_RETURN(o.keep, int_flag(a, "keep", true));
  }
  o.resume = a.get("resume");
  if (a.has("save-sync") && o.save_every == 0) {
    return invalid_argument("--save-sync needs --save-every N");
  }
  o.behind = !a.has("save-sync");
  return o;
}

}  // namespace

// --init-from DIR: the run's model is DIR/config.json's. The config's layers apply as without it
// (the embedded default, --config, each --set, --device), except that the default's model
// section is DIR's, so a model field the user leaves alone takes DIR's value. A model field the
// user does set must agree with DIR's (compared as hf_canonical forms, so n_kv_head 0 and
// n_kv_head = n_head are the same): otherwise one line naming the field and both values.
Result<TrainConfig> config_over_import(const ParsedArgs& a, const HfImportPlan& plan) {
  TrainConfig imported;
  imported.model = plan.model;
  const nlohmann::json model = config_to_json(imported)["model"];
  nlohmann::json j = default_config_json();
  j["model"] = model;
  if (a.has("config")) {
    STRATA_ASSIGN_OR_RETURN(nlohmann::json file, read_json_file(a.get("config")));
    STRATA_RETURN_IF_ERROR(merge_config(j, file, a.get("config")));
  }
  for (const std::string& assignment : a.all("set")) {
    STRATA_RETURN_IF_ERROR(apply_set(j, assignment));
  }
  auto disagrees = [&](const FieldDifference& d) {
    return invalid_argument("--init-from " + plan.dir + ": the config sets " + d.key + " " + d.a +
                            " but " + plan.config_path + " gives " + d.b +
                            " (the model comes from --init-from; leave " + d.key + " unset)");
  };
  auto cfg = parse_config(j);
  if (!cfg.ok()) {
    // A model setting that made the model invalid (model.arch gpt2 over a Llama): named as the
    // disagreement it is, when the config is valid without the user's model settings.
    nlohmann::json without = j;
    without["model"] = model;
    if (!parse_config(without).ok()) return cfg.status();
    for (const auto& [key, value] : j["model"].items()) {
      if (value != model[key]) {
        return disagrees({"model." + key, json_preview(value, kMaxShownValue), model[key].dump()});
      }
    }
    return cfg.status();
  }
  if (auto d = model_difference(hf_canonical(cfg->model), plan.model)) return disagrees(*d);
  cfg->model = plan.model;
  if (a.has("device")) {  // --device overrides the config's device
    STRATA_ASSIGN_OR_RETURN(cfg->device, parse_enum<DeviceKind>("--device", a.get("device")));
  }
  return cfg;
}

namespace {

// Note [Data parallel ranks]: the config for this rank of the world. Each rank's io.dirs are its
// own ("{rank}" replaced, so a single-process run reads it as 0); rank 0 alone writes metrics,
// traces and reports and logs below warnings; every rank writes its shard of a checkpoint (Note
// [Sharded checkpoints]). What does not work across ranks yet is refused with one line.
std::optional<SetupError> join_world(const ParsedArgs& a, TrainRun& run) {
  Communicator& w = *run.world;
  run.cfg.ranks = w.size();
  for (std::string& dir : run.cfg.io.dirs) dir = substitute_rank(dir, w.rank());
  if (w.size() == 1) return std::nullopt;
  if (a.has("auto")) {
    return SetupError{"--auto plans one process; with " + std::to_string(w.size()) +
                      " ranks set the schedule, batch and placement yourself"};
  }
  // Every rank must train the same model the same way, or the collectives would sum unlike
  // things (or wait forever for a size another rank never sends). The io section is each
  // rank's own (its directories, an injected fault).
  nlohmann::json j = config_to_json(run.cfg);
  j.erase("io");
  const std::string text = j.dump();
  const auto mine = static_cast<int64_t>(crc32c(text.data(), text.size()));
  auto most = w.all_reduce_max(mine), least = w.all_reduce_max(-mine);
  if (!most.ok()) return SetupError{most.status().message(), 1};
  if (!least.ok()) return SetupError{least.status().message(), 1};
  if (*most != mine || -*least != mine) {
    return SetupError{
        "the ranks were given different configs (only the io section may differ "
        "between ranks): give every rank the same --config and --set"};
  }
  return std::nullopt;
}

// The run's config: the flags' layers (over --init-from's model), --auto's choice, optim.alpha
// "auto" resolved (its simulated costs in `predicted`), then this rank's part of the world.
std::optional<SetupError> configure(const ParsedArgs& a, TrainRun& run, AlphaChoice& predicted) {
  Result<TrainConfig> cfg = TrainConfig{};
  if (a.has("init-from")) {
    if (a.has("resume")) {
      return SetupError{
          "--init-from and --resume cannot be combined: a resumed run's model, weights "
          "and optimizer state come from its checkpoint (give --resume alone)"};
    }
    auto plan = plan_hf_import(a.get("init-from"));
    if (!plan.ok())
      return SetupError{plan.status().message(),
                        exit_status_for(plan.status(), Stage::before_work)};
    run.import = std::move(*plan);
    cfg = config_over_import(a, *run.import);
  } else {
    cfg = load_config_from_args(a);
  }
  if (!cfg.ok()) return SetupError{cfg.status().message()};
  if (Status lora = check_lora(*cfg); !lora.ok()) return SetupError{lora.message()};
  // --auto: the planner chooses schedule, B x M, placement and alpha (planner/planner.h). Else
  // optim.alpha "auto" is simulated with --profile, when given.
  if (a.has("auto")) {
    cfg = auto_configure(*cfg, a.get("profile"));
    if (!cfg.ok()) return SetupError{cfg.status().message()};
  }
  cfg = resolve_auto_alpha(*cfg, a.get("profile"), &predicted);
  if (!cfg.ok()) return SetupError{cfg.status().message()};
  run.cfg = *cfg;
  return join_world(a, run);
}

// data.train's tokens and data.val's, with their loaders.
std::optional<SetupError> load_data(TrainRun& run) {
  const TrainConfig& c = run.cfg;
  auto data = load_token_data(c, c.data_train, "data.train", kEmbeddedCorpusBytes, 20240520);
  if (!data.ok()) return SetupError{data.status().message()};
  run.data = std::move(*data);
  const DataOrder order{c.data_shuffle, static_cast<uint64_t>(c.seed), c.data_pack};
  auto loader = DataLoader::create(run.data.shards, c.batch_size, c.seq_len, order);
  if (!loader.ok()) return SetupError{loader.status().message()};
  run.loader = std::make_unique<DataLoader>(std::move(*loader));
  if (!c.data_val.empty()) {
    auto val = load_val_data(c);
    if (!val.ok()) return SetupError{"data.val: " + val.status().message()};
    run.val_data = std::move(*val);
    std::vector<TokenShard> shards = run.val_data.shards;
    for (TokenShard& s : shards) s.name = "validation " + s.name;
    auto val_loader = DataLoader::create(std::move(shards), c.batch_size, c.seq_len);
    if (!val_loader.ok()) return SetupError{val_loader.status().message()};
    run.val_loader = std::make_unique<DataLoader>(std::move(*val_loader));
  }
  return std::nullopt;
}

// The flags of what the run writes, checked before it writes anything (open_outputs): a bad one
// leaves no metrics file and no checkpoint lock behind.
std::optional<SetupError> check_output_flags(const ParsedArgs& a, TrainRun& run) {
  auto ckpt = checkpoint_options(a);
  if (!ckpt.ok()) return SetupError{ckpt.status().message()};
  run.ckpt = *ckpt;
  if (a.has("trace") && !is_offloaded(run.cfg.schedule)) {
    return SetupError{
        "--trace needs an offloaded schedule (train.schedule horizontal or vertical)"};
  }
  if (a.has("report") && !a.has("metrics")) {
    return SetupError{"--report needs --metrics FILE: the report is drawn from the metrics"};
  }
  // Note [Writing an output file]: refused now, not after the run.
  for (const char* flag : {"metrics", "trace", "report"}) {
    if (!a.has(flag)) continue;
    Status usable = check_output_path(a.get(flag), std::string("--") + flag + " file");
    if (!usable.ok())
      return SetupError{usable.message(), exit_status_for(usable, Stage::before_work)};
  }
  return std::nullopt;
}

// The metrics file, and the checkpoint directory: locked and claimed, made, and its engine. With
// ranks, every rank writes its shard of each checkpoint and rank 0 publishes it (Note [Sharded
// checkpoints]): rank 0 alone holds the directory and claims it.
std::optional<SetupError> open_outputs(const ParsedArgs& a, TrainRun& run) {
  if (a.has("metrics") && writes_outputs(run)) {
    run.metrics_path = a.get("metrics");
    std::error_code ec;
    if (!std::filesystem::exists(run.metrics_path, ec))
      run.metrics_scratch = ScratchFile(run.metrics_path);
    run.metrics.open(run.metrics_path, std::ios::out | std::ios::trunc);
    if (!run.metrics)
      return SetupError{"cannot open metrics file " + run.metrics_path + " for writing"};
  }
  run.lineage = {new_run_id()};
  if (run.ckpt.save_every > 0 && writes_outputs(run)) {
    auto lock = CheckpointDirLock::acquire(run.ckpt.dir);
    if (!lock.ok())
      return SetupError{lock.status().message(),
                        exit_status_for(lock.status(), Stage::before_work)};
    run.ckpt_lock.emplace(std::move(*lock));
    if (run.ckpt.resume.empty()) {  // a resumed run claims the directory once it knows its step
      auto claimed = claim_checkpoint_root(run.ckpt.dir, run.lineage, -1);
      if (!claimed.ok()) return SetupError{claimed.status().message()};
    }
  }
  if (run.ckpt.save_every > 0) {
    // Another rank may get here before rank 0 made the directory.
    std::error_code ec;
    std::filesystem::create_directories(run.ckpt.dir, ec);
    if (ec) {
      return SetupError{"cannot create checkpoint directory " + run.ckpt.dir + ": " + ec.message()};
    }
    auto e = create_configured_engine(run.cfg.io, run.ckpt.dir);
    if (!e.ok()) return SetupError{e.status().message()};
    run.ckpt_engine = std::move(*e);
  }
  if (writes_outputs(run)) {
    run.trace_path = a.get("trace");
    run.report_path = a.get("report");
  }
  return std::nullopt;
}

}  // namespace

// The device, the ranks' transport and the trainer, with alpha "auto"'s simulated costs.
std::optional<SetupError> set_up_trainer(TrainRun& run, const AlphaChoice& predicted) {
  const TrainConfig& c = run.cfg;
  auto device = create_configured_device(c, run.world->local_rank());
  if (!device.ok())
    return SetupError{device.status().message(),
                      exit_status_for(device.status(), Stage::before_work)};
  run.device = std::move(*device);
  auto transport = create_configured_transport(c, *run.device, *run.world);
  if (!transport.ok()) {
    return SetupError{transport.status().message(),
                      exit_status_for(transport.status(), Stage::before_work)};
  }
  auto trainer = create_trainer(*run.device, c, *run.world, std::move(*transport));
  if (!trainer.ok())
    return SetupError{trainer.status().message(),
                      exit_status_for(trainer.status(), Stage::before_work)};
  run.trainer = std::move(*trainer);
  if (predicted.wait_iter_s > 0) {
    run.trainer->set_speculation_costs(predicted.iter_s, predicted.wait_iter_s, predicted.repair_s,
                                       "simulated");
  }
  return std::nullopt;
}

bool writes_outputs(const TrainRun& run) {
  return run.world->rank() == 0;
}

std::optional<SetupError> set_up(const ParsedArgs& a, TrainRun& run) {
  AlphaChoice predicted;
  if (auto err = configure(a, run, predicted)) return err;
  if (auto err = load_data(run)) return err;
  if (auto err = check_output_flags(a, run)) return err;
  if (auto err = check_resume(a, run)) return err;
  // Note [Storage directories checked first].
  if (is_offloaded(run.cfg.schedule)) {
    Status dirs = prepare_storage_dirs(run.cfg.io.dirs);
    if (!dirs.ok()) return SetupError{dirs.message(), exit_status_for(dirs, Stage::before_work)};
  }
  if (auto err = open_outputs(a, run)) return err;
  if (auto err = set_up_trainer(run, predicted)) return err;
  run.quiet = a.has("quiet") || !writes_outputs(run);
  return std::nullopt;
}

namespace {

// Note [Loss masks]: how many of the tokens are trained, when a mask leaves some out.
std::string mask_note(const TrainData& d) {
  const bool masked =
      std::any_of(d.masks.begin(), d.masks.end(), [](const auto& m) { return m.has_value(); });
  if (!masked) return "";
  return "; loss mask: " + std::to_string(d.trained) + " of " + std::to_string(d.size) +
         " tokens trained";
}

// Note [Example rows]: the examples, one a row, and those cut to the row.
std::string rows_note(const DataLoader& loader) {
  const ExampleRows* rows = loader.example_rows();
  if (rows == nullptr) return "";
  return "; one example a row (data.pack false): " + std::to_string(rows->examples()) +
         " examples, " + std::to_string(rows->cut()) + " cut to train.seq_len + 1 tokens";
}

}  // namespace

void log_run(const TrainRun& run) {
  const ModelConfig& m = run.cfg.model;
  const Trainer& t = *run.trainer;
  log_info("model: " + std::to_string(m.n_layer) + " layers, " + std::to_string(m.n_head) +
           " heads, " + std::to_string(m.n_embd) + " channels, vocab " +
           std::to_string(m.vocab_size) + ": " +
           human_count(static_cast<double>(t.layout().parameter_count)) + " parameters");
  if (run.cfg.lora.enabled()) log_info(describe_lora(t.layout()));
  log_info("data: " + run.data.name + ", " + human_count(static_cast<double>(run.data.size)) +
           " tokens" + (run.cfg.data_shuffle ? ", shuffled per epoch" : "") + mask_note(run.data) +
           rows_note(*run.loader) + "; batch " + std::to_string(run.cfg.batch_size) + " x " +
           std::to_string(run.cfg.seq_len) + " x " + std::to_string(run.cfg.grad_accum) +
           " micro-batches = " + std::to_string(t.tokens_per_step()) + " tokens/step");
  if (run.cfg.ranks > 1) {
    log_info("ranks: " + run.world->describe() + "; each trains " +
             std::to_string(run.cfg.grad_accum) + " of the step's " +
             std::to_string(run.cfg.grad_accum * run.cfg.ranks) + " micro-batches, " +
             std::to_string(t.tokens_per_step() * run.cfg.ranks) + " tokens/step in all");
  }
  log_info(std::string("device: ") + run.device->name());
  for (const std::string& line : t.describe()) log_info(line);
}

}  // namespace strata::cli
