// strata train: config -> data -> trainer -> steps, with progress and per-step metrics. The set-up
// and the checkpoints are train_setup.cpp's and train_checkpoints.cpp's (cli/train_run.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/stop_signals.h"
#include "cli/train_run.h"
#include "core/dtype.h"
#include "core/file_util.h"
#include "core/log.h"
#include "core/output_file.h"
#include "formats/checkpoint.h"
#include "model/gpt.h"
#include "model/sample.h"
#include "sched/executor.h"

namespace strata::cli {

namespace {

// One step's line in the metrics file (docs/design.md §10).
nlohmann::json metrics_line(const StepStats& st, double tokens_per_s, double flops_per_step,
                            const Device& device, const Trainer& trainer,
                            const std::vector<CheckpointReport>& checkpoints,
                            std::optional<double> val_loss) {
  nlohmann::json line = {
      {"step", st.step + 1},  // counted as the console and the checkpoints count: from 1
      {"loss", st.loss},
      {"lr", st.lr},
      {"grad_norm", st.grad_norm},
      {"skipped", st.skipped},
      {"trained_tokens", st.trained_tokens},
      {"tokens_per_s", tokens_per_s},
      {"iter_s", st.seconds},
      {"model_flops_per_s", flops_per_step / st.seconds},
      {"peak_device_bytes", device.memory_stats().device_peak},
      {"peak_host_bytes", device.memory_stats().host_peak},
  };
  if (device.memory_stats().device_budget > 0) {
    line["device_budget_bytes"] = device.memory_stats().device_budget;
  }
  if (val_loss) line["val_loss"] = *val_loss;
  for (const CheckpointReport& c : checkpoints) {  // finished at this boundary
    line["checkpoints"].push_back(
        {{"step", c.step}, {"stall_s", c.stall_s}, {"write_s", c.write_s}, {"behind", c.behind}});
  }
  trainer.add_step_metrics(line, st.seconds);
  return line;
}

Status write_trace(const Trainer& trainer, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(nlohmann::json trace, trainer.last_step_trace());
  return write_output_file(path, trace.dump() + "\n", "trace file");
}

// Validation is due after `done` steps: every train.eval_every steps, and after the last one
// whenever data.val is set.
bool eval_due(const TrainRun& run, int64_t done) {
  if (!run.val_loader) return false;
  const int64_t every = run.cfg.eval_every;
  return (every > 0 && done % every == 0) || done == run.cfg.steps;
}

// The validation loss under the weights after the last step: the first train.eval_batches
// batches of data.val (wrapping around a file shorter than that), the same batches every time.
Result<double> validate(TrainRun& run) {
  const int64_t BT = run.cfg.batch_size * run.cfg.seq_len, n = run.cfg.eval_batches;
  std::vector<int32_t> inputs(static_cast<size_t>(n * BT));  // (eval_batches, B, T)
  std::vector<int32_t> targets(inputs.size());               // (eval_batches, B, T)
  STRATA_RETURN_IF_ERROR(run.val_loader->set_position(0));
  for (int64_t b = 0; b < n; ++b) {
    STRATA_RETURN_IF_ERROR(
        run.val_loader->next_batch(inputs.data() + b * BT, targets.data() + b * BT));
  }
  return run.trainer->evaluate(inputs.data(), targets.data(), n);
}

// train.sample_every: text from the weights after `done` steps (Note [Sampling]): the working
// weights slab by slab (the master, rounded in bf16 mode: what the model computes with), from a
// newline (token 0 for a vocabulary too small for bytes), temperature 1, seed train.seed.
Result<std::string> sample_now(TrainRun& run) {
  const TrainConfig& c = run.cfg;
  const bool bytes = c.model.vocab_size >= 256;
  SampleOptions o;
  o.new_tokens = c.sample_tokens;
  o.temperature = 1.0;
  o.seed = static_cast<uint64_t>(c.seed);
  auto weights = [&](int64_t slab, float* dst) {
    STRATA_RETURN_IF_ERROR(run.trainer->read_slab_pieces(slab, [&](const SlabPiece& p) {
      std::copy_n(p.master, p.count, dst + p.begin);
      return Status();
    }));
    if (c.precision == Precision::bf16) {
      round_to_bf16(dst, dst, run.trainer->layout().slabs[static_cast<size_t>(slab)].numel);
    }
    return Status();
  };
  STRATA_ASSIGN_OR_RETURN(std::vector<int32_t> out,
                          generate(*run.device, c.model, weights, {bytes ? '\n' : 0}, o));
  std::string text;
  for (size_t i = 1; i < out.size(); ++i) {
    if (!bytes) {
      text += (i > 1 ? " " : "") + std::to_string(out[i]);
    } else if (out[i] >= 32 && out[i] < 127) {
      text += static_cast<char>(out[i]);
    } else {
      char esc[8];
      std::snprintf(esc, sizeof esc, out[i] == '\n' ? "\\n" : "\\x%02x", out[i]);
      text += esc;
    }
  }
  return text;
}

// After a step: a checkpoint written behind training collected once it is done (or waited for
// when the next is due: back-pressure), the checkpoint when one is due (behind training unless it
// is the last step's or --save-sync), then the step's metrics line.
Status after_step(TrainRun& run, const StepStats& st, double tokens_per_s, double flops_per_step,
                  Progress& progress) {
  const int64_t done = st.step + 1;
  std::optional<double> val_loss;
  if (eval_due(run, done)) {
    STRATA_ASSIGN_OR_RETURN(const double v, validate(run));
    val_loss = run.last_val_loss = v;
    char line[96];
    std::snprintf(line, sizeof line, "step %lld: validation loss %.4f",
                  static_cast<long long>(done), v);
    progress.note(line);
  }
  if (run.cfg.sample_every > 0 && done % run.cfg.sample_every == 0) {
    STRATA_ASSIGN_OR_RETURN(const std::string text, sample_now(run));
    progress.note("step " + std::to_string(done) + " sample: " + text);
  }
  const bool due = checkpoint_due(run, done);
  std::vector<CheckpointReport> finished;  // checkpoints finished at this boundary
  if (run.background.running() && (due || run.background.done())) {
    STRATA_ASSIGN_OR_RETURN(CheckpointReport r, collect_save(run, progress));
    finished.push_back(r);
  }
  if (due) {
    bool behind = false;
    if (run.ckpt.behind && done < run.cfg.steps) {
      STRATA_ASSIGN_OR_RETURN(behind, start_save_behind(run, done));
    }
    if (!behind) {
      STRATA_ASSIGN_OR_RETURN(CheckpointReport r, save_at_standstill(run, done, progress));
      finished.push_back(r);
    }
  }
  if (!run.metrics.is_open()) return Status::ok_status();
  const nlohmann::json line =
      metrics_line(st, tokens_per_s, flops_per_step, *run.device, *run.trainer, finished, val_loss);
  run.metrics << line.dump() << '\n';
  run.metrics.flush();
  if (!run.metrics) return io_error("writing metrics file " + run.metrics_path + " failed");
  return Status::ok_status();
}

// Note [Stopping on a signal]: the step boundary after the first SIGINT or SIGTERM, `done`
// steps done. Pending steps applied, a checkpoint when checkpointing is configured (unless this
// step just wrote one), where to resume from; returns 128 + the signal.
int stop_at_boundary(TrainRun& run, int sig, int64_t done, Progress& progress) {
  const std::string stopped = std::string("stopped by ") + signal_name(sig) + " after step " +
                              std::to_string(done) + " of " + std::to_string(run.cfg.steps);
  Status fin = run.trainer->finish();
  if (!fin.ok()) {
    progress.finish();
    return fail(stopped + ", but applying the pending steps failed: " + fin.to_string(), 1);
  }
  if (run.background.running()) {  // the last one due, begun behind training, finished first
    auto collected = collect_save(run, progress);
    if (!collected.ok()) {
      progress.finish();
      return fail(stopped + ", but its checkpoint failed: " + collected.status().to_string(), 1);
    }
  }
  std::string resume_from;
  if (run.ckpt.save_every > 0 && done > 0) {
    if (!checkpoint_due(run, done)) {  // a due one was written after the step
      auto saved = save_at_standstill(run, done, progress);
      if (!saved.ok()) {
        progress.finish();
        return fail(stopped + ", but its checkpoint failed: " + saved.status().to_string(), 1);
      }
    }
    auto dir = resolve_checkpoint(run.ckpt.dir);
    resume_from = dir.ok() ? "; resume with --resume " + *dir : "";
  } else if (!run.ckpt.resume.empty() && done > 0) {
    resume_from = "; no checkpoint is configured (--save-every N --checkpoint-dir DIR), so the " +
                  std::to_string(done) + " steps after " + run.ckpt.resume + " are lost";
  } else {
    resume_from = "; no checkpoint is configured (--save-every N --checkpoint-dir DIR)";
  }
  progress.finish();
  log_info(stopped + resume_from);
  return 128 + sig;
}

// Note [Data parallel ranks]: of the step's ranks x M micro-batches from the data stream, this
// rank's M, (M, B, T) each; the others' are read past, so every rank's loader stays at the
// stream's position.
Status next_micro_batches(TrainRun& run, int32_t* inputs, int32_t* targets) {
  const int64_t BT = run.cfg.batch_size * run.cfg.seq_len, M = run.cfg.grad_accum;
  std::vector<int32_t> past_in, past_tg;  // (B, T) each: another rank's micro-batch
  for (int r = 0; r < run.cfg.ranks; ++r) {
    for (int64_t k = 0; k < M; ++k) {
      if (r == run.world->rank()) {
        STRATA_RETURN_IF_ERROR(run.loader->next_batch(inputs + k * BT, targets + k * BT));
        continue;
      }
      past_in.resize(static_cast<size_t>(BT));
      past_tg.resize(static_cast<size_t>(BT));
      STRATA_RETURN_IF_ERROR(run.loader->next_batch(past_in.data(), past_tg.data()));
    }
  }
  return Status::ok_status();
}

// The stop signal every rank acts on at this boundary (Note [Stopping on a signal]): the largest
// any rank has seen, so all ranks stop at the same step (a rank that stopped alone would leave the
// others waiting in a collective).
Result<int> agreed_stop_signal(TrainRun& run) {
  const int sig = stop_signal();
  if (run.world->size() == 1) return sig;
  STRATA_ASSIGN_OR_RETURN(const int64_t any, run.world->all_reduce_max(sig));
  return static_cast<int>(any);
}

const std::vector<FlagSpec> kTrainFlags = {
    {"config", true, false},         {"set", true, true},     {"device", true, false},
    {"metrics", true, false},        {"trace", true, false},  {"save-every", true, false},
    {"checkpoint-dir", true, false}, {"keep", true, false},   {"resume", true, false},
    {"quiet", false, false},         {"auto", false, false},  {"profile", true, false},
    {"save-sync", false, false},     {"report", true, false}, {"init-from", true, false},
    {"allow-changes", true, false}};

// The step a run starts from: its checkpoint's with --resume, else 0 (with --init-from's
// weights). A failure is one line and its exit code.
std::optional<SetupError> start_from(TrainRun& run, int64_t& start_step) {
  start_step = 0;
  if (!run.ckpt.resume.empty()) {
    auto step = resume(run);
    if (!step.ok())
      return SetupError{step.status().message(),
                        exit_status_for(step.status(), Stage::before_work)};
    start_step = *step;
  } else if (run.import) {
    Status imported = init_from(run);
    if (!imported.ok())
      return SetupError{imported.message(), exit_status_for(imported, Stage::before_work)};
  }
  return std::nullopt;
}

// The first and the last step's loss, for the summary line.
struct LossRange {
  double first = 0, last = 0;
  bool any = false;  // a step ran (train.steps 0 runs none)
};

// Steps start_step .. train.steps - 1, each followed by after_step; a stop signal ends the run at
// the boundary where it is seen (Note [Stopping on a signal]), the last one included. nullopt
// once every step is done, else the exit status.
std::optional<int> run_steps(TrainRun& run, int64_t start_step, Progress& progress,
                             LossRange& loss) {
  const TrainConfig& cfg = run.cfg;
  Trainer& trainer = *run.trainer;
  const int64_t BT = cfg.batch_size * cfg.seq_len;
  std::vector<int32_t> inputs(static_cast<size_t>(BT * cfg.grad_accum));  // (M, B, T)
  std::vector<int32_t> targets(inputs.size());                            // (M, B, T)
  const int64_t step_tokens = trainer.tokens_per_step() * cfg.ranks;      // every rank's
  const double flops_per_step = gpt_train_flops(cfg.model, cfg.seq_len, step_tokens);
  for (int64_t step = start_step; step < cfg.steps; step++) {
    auto sig = agreed_stop_signal(run);
    if (!sig.ok()) return fail("training stopped: " + sig.status().to_string(), 1);
    if (*sig) return stop_at_boundary(run, *sig, step, progress);
    Status batch = next_micro_batches(run, inputs.data(), targets.data());
    if (!batch.ok()) {
      progress.finish();
      return fail("training stopped: " + batch.to_string(), 1);
    }
    // The trace shows the last step: steady state, with the previous step's pending work.
    if (!run.trace_path.empty()) trainer.set_record_trace(step == cfg.steps - 1);
    auto st = trainer.train_step(inputs.data(), targets.data());
    if (!st.ok()) {
      progress.finish();
      return fail("training stopped: " + st.status().to_string(), 1);
    }
    const double tokens_per_s = static_cast<double>(step_tokens) / st->seconds;
    if (step == start_step) loss.first = st->loss;
    loss.last = st->loss;
    loss.any = true;
    progress.on_step(*st, tokens_per_s);
    Status after = after_step(run, *st, tokens_per_s, flops_per_step, progress);
    if (!after.ok()) {  // a full disk under a checkpoint too: a failure while running (1)
      progress.finish();
      return fail("training stopped: " + after.to_string(), 1);
    }
  }
  auto sig = agreed_stop_signal(run);
  if (!sig.ok()) return fail("training stopped: " + sig.status().to_string(), 1);
  if (*sig) return stop_at_boundary(run, *sig, cfg.steps, progress);
  return std::nullopt;
}

// After the last step: the pending work, the trace, the report, the summary line. The exit
// status.
int finish_run(TrainRun& run, Progress& progress, const LossRange& loss,
               std::chrono::steady_clock::time_point t_start) {
  Status fin = run.trainer->finish();
  if (!fin.ok()) {
    progress.finish();
    return fail("training stopped: " + fin.to_string(), 1);
  }
  if (!run.trace_path.empty()) {
    Status traced = write_trace(*run.trainer, run.trace_path);
    if (!traced.ok()) return fail(traced.message(), 1);
  }
  if (!run.report_path.empty()) {
    run.metrics.close();
    Status reported = write_run_report(run.metrics_path, run.trace_path, run.report_path,
                                       "Strata run: " + run.metrics_path);
    if (!reported.ok()) return fail(reported.message(), 1);
    log_info("report written to " + run.report_path);
  }
  progress.finish();
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  if (!loss.any && run.val_loader) {  // train.steps 0: the initial (or imported) model's
    auto v = validate(run);
    if (!v.ok()) return fail("validation stopped: " + v.status().to_string(), 1);
    run.last_val_loss = *v;
  }
  char summary[200];
  std::snprintf(summary, sizeof summary, "trained %lld steps in %.1f s",
                static_cast<long long>(run.cfg.steps), total_s);
  std::string text = summary;
  if (loss.any) {
    std::snprintf(summary, sizeof summary, "; loss %.4f -> %.4f", loss.first, loss.last);
    text += summary;
  }
  if (run.last_val_loss) {
    char val[64];
    std::snprintf(val, sizeof val, "; validation loss %.4f", *run.last_val_loss);
    text += val;
  }
  log_info(text);
  return 0;
}

int train(const ParsedArgs& parsed, TrainRun& run) {
  if (auto err = set_up(parsed, run)) return fail(err->message, err->code);
  log_run(run);
  int64_t start_step = 0;
  if (auto err = start_from(run, start_step)) return fail(err->message, err->code);
  // Until here a signal stopped the process at once, removing the store (Note [Stopping on a
  // signal]); from here it stops at a step boundary, and the metrics file is the run's to keep.
  stop_at_step_boundaries();
  run.metrics_scratch.release();
  Progress progress(start_step, run.cfg.steps, run.cfg.log_every, run.quiet);
  LossRange loss;
  const auto t_start = std::chrono::steady_clock::now();
  if (std::optional<int> stopped = run_steps(run, start_step, progress, loss)) return *stopped;
  return finish_run(run, progress, loss, t_start);
}

// The ranks joined, then the run; a rank that fails ends them all.
int train_main(const ParsedArgs& a) {
  TrainRun run;
  auto world = open_world();
  if (!world.ok()) return fail(world.status().message(), 2);
  run.world = std::move(*world);
  if (run.world->size() > 1) {
    set_log_rank(run.world->rank());
    if (run.world->rank() > 0) set_log_level(LogLevel::warn);  // rank 0 logs the run
  }
  const int code = train(a, run);
  // A rank that fails leaves the others waiting in a collective: it ends them all, having said
  // why (its lines name the rank). Stops by signal are agreed (agreed_stop_signal): every rank
  // returns at the same boundary.
  if (code != 0 && code < 128 && run.world->size() > 1) run.world->abort_all(code);
  return code;
}

}  // namespace

int cmd_train(const std::vector<std::string>& args) {
  return run_command(args, kTrainFlags, "train", train_main);
}

}  // namespace strata::cli
