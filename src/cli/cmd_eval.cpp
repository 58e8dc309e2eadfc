// `strata eval`: the loss and perplexity of a checkpoint, or of a Hugging Face model directory,
// on a token file, without training a step. The model is set up as `strata train` would set it
// up (the checkpoint's config, or --init-from's, under --config and --set: any schedule,
// placement, precision and device), its weights loaded, and Trainer::evaluate run over the
// file's whole (B, T) batches in order (Note [Evaluation batches]). The last line on stdout is
// one JSON object: loss, perplexity, batches, tokens.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/train_run.h"
#include "core/log.h"
#include "core/targets.h"
#include "formats/checkpoint.h"
#include "io/storage_dirs.h"
#include "planner/planner.h"

namespace strata::cli {

namespace {

// Note [Evaluation batches]
// The files are read in order from the first's start in whole (B, T) batches (B = train.batch_size,
// T = train.seq_len, as DataLoader reads: targets shifted by one token), at most --batches of them
// and never past one pass, so no token is counted twice and the tail shorter than a batch is
// left out (Note [Sharded corpora] in data/dataloader.h). They are evaluated in groups of at most
// kEvalGroup batches (the host holds one group's tokens); the loss is the mean over the counted
// targets (all of them without a loss mask: the mean of the batches' means), summed in order in
// double (one group: Trainer::evaluate's result itself, the bits of train's val_loss on them).
constexpr int64_t kEvalGroup = 16;

const std::vector<FlagSpec> kEvalFlags = {{"checkpoint", true, false}, {"model", true, false},
                                          {"data", true, false},       {"batches", true, false},
                                          {"config", true, false},     {"set", true, true},
                                          {"device", true, false},     {"quiet", false, false}};

// The run's config: the checkpoint's (as --resume reads it) or --model's (as --init-from does),
// under --config and --set; data.val is --data.
std::optional<SetupError> eval_config(const ParsedArgs& a, TrainRun& run, std::string& ckpt_dir) {
  Result<TrainConfig> cfg = TrainConfig{};
  if (a.has("checkpoint")) {
    auto dir = resolve_checkpoint(a.get("checkpoint"));
    if (!dir.ok()) return SetupError{dir.status().message()};
    ckpt_dir = *dir;
    ParsedArgs over = a;
    over.values["resume"] = {ckpt_dir};  // load_config_from_args: the checkpoint's config
    cfg = load_config_from_args(over);
  } else {
    auto plan = plan_hf_import(a.get("model"));
    if (!plan.ok())
      return SetupError{plan.status().message(),
                        exit_status_for(plan.status(), Stage::before_work)};
    run.import = std::move(*plan);
    cfg = config_over_import(a, *run.import);
  }
  if (!cfg.ok()) return SetupError{cfg.status().message()};
  cfg->data_val = a.get("data");
  run.cfg = *cfg;
  return std::nullopt;
}

// The mean loss over `batches` whole batches of the loader from its start (Note [Evaluation
// batches]), and in *trained the targets it counts (Note [Ignored targets]). Groups weigh by
// their counted targets in units of B x T: without a mask, exactly their batches.
Result<double> eval_loss(TrainRun& run, DataLoader& loader, int64_t batches, int64_t* trained) {
  const int64_t BT = run.cfg.batch_size * run.cfg.seq_len;
  std::vector<int32_t> inputs(static_cast<size_t>(kEvalGroup * BT));  // (group, B, T)
  std::vector<int32_t> targets(inputs.size());                        // (group, B, T)
  double sum = 0;
  *trained = 0;
  for (int64_t done = 0; done < batches;) {
    const int64_t n = std::min(kEvalGroup, batches - done);
    for (int64_t b = 0; b < n; ++b) {
      STRATA_RETURN_IF_ERROR(loader.next_batch(inputs.data() + b * BT, targets.data() + b * BT));
    }
    const int64_t counted = counted_targets(targets.data(), n * BT);
    *trained += counted;
    STRATA_ASSIGN_OR_RETURN(const double mean,
                            run.trainer->evaluate(inputs.data(), targets.data(), n));
    if (n == batches) return mean;  // one group: the trainer's own mean, as train's val_loss
    sum += mean * (static_cast<double>(counted) / static_cast<double>(BT));
    done += n;
  }
  return sum / (static_cast<double>(*trained) / static_cast<double>(BT));
}

int eval_main(const ParsedArgs& a) {
  if (a.has("checkpoint") == a.has("model")) {
    return fail("strata eval: give --checkpoint DIR or --model HF_DIR (one of them)", 2);
  }
  if (!a.has("data"))
    return fail("strata eval: --data FILES (a token file, a glob or a comma list) is required", 2);
  int64_t limit = 0;  // 0: the whole file
  if (a.has("batches")) {
    auto n = int_flag(a, "batches", false);
    if (!n.ok()) return fail(n.status().message(), 2);
    limit = *n;
  }
  TrainRun run;
  auto world = open_world();
  if (!world.ok()) return fail(world.status().message(), 2);
  run.world = std::move(*world);
  if (run.world->size() > 1) return fail("strata eval runs as one process, not under mpirun", 2);
  std::string ckpt_dir;
  if (auto err = eval_config(a, run, ckpt_dir)) return fail(err->message, err->code);
  if (Status lora = check_lora(run.cfg); !lora.ok()) return fail(lora.message(), 2);
  auto data = load_val_data(run.cfg);
  if (!data.ok()) return fail("--data: " + data.status().message(), 2);
  auto loader = DataLoader::create(data->shards, run.cfg.batch_size, run.cfg.seq_len);
  if (!loader.ok()) return fail(loader.status().message(), 2);
  const int64_t whole = loader->batches_per_epoch();  // every file's whole batches, in order
  const int64_t batches = limit > 0 ? std::min(limit, whole) : whole;
  if (is_offloaded(run.cfg.schedule)) {  // Note [Storage directories checked first]
    Status dirs = prepare_storage_dirs(run.cfg.io.dirs);
    if (!dirs.ok()) return fail(dirs.message(), exit_status_for(dirs, Stage::before_work));
  }
  if (auto err = set_up_trainer(run, AlphaChoice{})) return fail(err->message, err->code);
  if (!ckpt_dir.empty()) {
    auto meta = load_checkpoint(ckpt_dir, run.cfg, [&](int64_t slab, const SlabPieceFn& fill) {
      return run.trainer->write_slab_pieces(slab, fill);
    });
    if (!meta.ok())
      return fail(meta.status().message(), exit_status_for(meta.status(), Stage::before_work));
  } else if (Status s = init_from(run); !s.ok()) {
    return fail(s.message(), exit_status_for(s, Stage::before_work));
  }
  int64_t trained = 0;
  auto loss = eval_loss(run, *loader, batches, &trained);
  if (!loss.ok()) return fail("evaluation stopped: " + loss.status().to_string(), 1);
  if (trained == 0) {  // Note [Ignored targets]: no target to take a mean over
    return fail("--data: the loss mask leaves out every target of the " + std::to_string(batches) +
                    " batches read; nothing to evaluate",
                2);
  }
  const int64_t tokens = batches * run.cfg.batch_size * run.cfg.seq_len;
  if (!a.has("quiet")) {
    char line[160];
    std::snprintf(line, sizeof line, "%lld batches of %lld x %lld, %lld tokens: loss %.4f",
                  static_cast<long long>(batches), static_cast<long long>(run.cfg.batch_size),
                  static_cast<long long>(run.cfg.seq_len), static_cast<long long>(tokens), *loss);
    log_info(std::string(line) + " (" + data->name + ")");
  }
  char json[256];
  std::snprintf(json, sizeof json,
                "{\"loss\": %.17g, \"perplexity\": %.17g, \"batches\": %lld, \"tokens\": %lld, "
                "\"trained_tokens\": %lld}\n",
                *loss, std::exp(*loss), static_cast<long long>(batches),
                static_cast<long long>(tokens), static_cast<long long>(trained));
  std::fputs(json, stdout);
  return 0;
}

}  // namespace

int cmd_eval(const std::vector<std::string>& args) {
  return run_command(args, kEvalFlags, "eval", eval_main);
}

}  // namespace strata::cli
