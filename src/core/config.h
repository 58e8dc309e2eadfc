// Training configuration: the JSON a user writes, `--set key=value` overrides, and the validated
// structs the trainer reads.
//
// Flow: default_config_json() -> merge_config(file) -> apply_set(each --set) -> parse_config().
// Merging checks names and JSON types against the default (which holds every key), so a typo is
// an error naming the key instead of a silently ignored setting; parse_config() then checks
// values and the relations between them.
//
// JSON layout:
//   {"device": "cpu" | "cuda" | "cpu-discrete",
//    "model": {arch, vocab_size, context_length, n_layer, n_head, n_embd, n_kv_head, ffn_hidden,
//              rope_theta, rope_scaling {type, factor, low_freq_factor, high_freq_factor,
//              original_context_length}, norm_eps, tie_embeddings},
//    "train": {batch_size, seq_len, grad_accum, steps, seed, log_every, schedule, precision,
//              matmul, eval_every, eval_batches, sample_every, sample_tokens},
//    "optim": {lr, min_lr_ratio, beta1, beta2, eps, weight_decay, grad_clip, warmup_steps, alpha,
//              speculation},
//    "data":  {train, val, format},
//    "io":    {engine, queue_depth, block_size, workers, read_bytes_per_s, write_bytes_per_s,
//              faults, dirs, stripe_unit, checksums},
//    "memory":  {device_bytes, host_bytes},
//    "offload": {params_on_host, optim_on_host, checkpoints_on_host, grads_on_host,
//                embed_optim_on_host},
//    "activations": {policy, tier}}
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/config_enums.h"
#include "core/status.h"

namespace strata {

// Llama 3's rotary frequency scaling (HF rope_scaling with rope_type "llama3"); the only
// scaling Strata supports (model/rope.h).
struct RopeScaling {
  RopeScalingKind type = RopeScalingKind::none;
  double factor = 8;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int64_t original_context_length = 8192;
};

// The model's shape. `arch` picks the block (Note [Llama blocks] in model/block.h); the fields
// after n_embd are Llama's and a GPT-2 model must leave them at their defaults (parse_config
// names the first one that is not).
struct ModelConfig {
  ModelArch arch = ModelArch::gpt2;
  int64_t vocab_size = 256;
  int64_t context_length = 128;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  int64_t n_kv_head = 0;   // key/value heads (grouped-query attention); 0: n_head
  int64_t ffn_hidden = 0;  // the MLP's hidden width; 0: 4 * n_embd
  double rope_theta = 10000;
  RopeScaling rope_scaling;
  double norm_eps = 1e-5;      // RMSNorm's epsilon (GPT-2's LayerNorm: 1e-5, fixed)
  bool tie_embeddings = true;  // the LM head is the token embedding (GPT-2: always)

  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t ffn() const { return ffn_hidden > 0 ? ffn_hidden : 4 * n_embd; }
  int64_t head_size() const { return n_embd / n_head; }
  int64_t kv_width() const { return kv_heads() * head_size(); }  // the k (or v) row: NKV * hs
};

struct OptimConfig {
  float lr = 3e-3f;           // peak learning rate, reached after warmup
  float min_lr_ratio = 0.1f;  // the cosine decay ends at lr * min_lr_ratio
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;  // max global gradient norm; 0 turns clipping off
  int64_t warmup_steps = 40;
  // GreedySnake's α split (docs/design.md §5.7), in [0, 1]: the fraction of each block's params
  // whose optimizer step runs during the next iteration's forward, just before the block is
  // fetched (vertical schedule); the rest (1 - α) runs during backward, overlapped with the
  // backward of earlier blocks. nullopt is "auto": `strata train --profile HW.json` picks α from
  // the planner's simulation of the run's own plans, and without a profile it is 1 (alpha()).
  // With clipping on, the backward part runs speculatively (Note [Speculative steps] in
  // sched/schedule_spec.h).
  std::optional<double> alpha;
  double alpha_or_default() const { return alpha.value_or(1.0); }
  // Whether a vertical step with clipping on and α < 1 speculates (runs part 0 in backward with
  // the clip factor assumed 1, validated once the norm is known) or waits for the norm (both
  // parts in the next forward): "auto" chooses per step from how often the norm clipped lately
  // (train/speculation_policy.h); "on" and "off" force either. Bit-identical results either way.
  Speculation speculation = Speculation::automatic;
};

// The storage engine and the striped store (docs/design.md §4). Used by `strata bench-io` and by
// the offloaded schedules.
struct IoConfig {
  IoEngineKind engine = IoEngineKind::automatic;  // "auto" | "uring" | "posix"
  int64_t queue_depth = 32;                       // requests in flight per ring / worker pool
  int64_t block_size = 1 << 20;  // large requests are split into blocks of this size
  int64_t workers = 1;           // rings (io_uring) or threads (posix)
  int64_t read_bytes_per_s = 0;  // rate limit, 0: none (emulates a slower SSD)
  int64_t write_bytes_per_s = 0;
  std::string faults;             // fault injection spec (io/fault_injector.h); "" off
  std::vector<std::string> dirs;  // storage directories, one per SSD
  int64_t stripe_unit = 1 << 20;  // RAID-0 stripe unit across dirs
  bool checksums = false;         // CRC32C per stripe-unit chunk, verified on read
};

// Tier budgets (docs/design.md §3), in bytes; 0: no budget (the machine's memory). A run whose plan
// does not fit them is refused before step 1.
struct MemoryConfig {
  int64_t device_bytes = 0;
  int64_t host_bytes = 0;
};

// Placement of the offloaded schedules: the fraction of blocks, each in [0, 1], whose state of
// that kind is kept in host memory between uses; the rest lives on storage (io.dirs), so any
// fraction below 1 needs io.dirs.
struct OffloadConfig {
  double params_on_host = 0.0;       // working parameters
  double optim_on_host = 0.0;        // optimizer state (master weights, m, v)
  double checkpoints_on_host = 1.0;  // block-input checkpoints
  double grads_on_host = 0.0;        // a block's f32 gradient, from leaving the device to its step
  // The embedding group's optimizer state (master, m, v): host, or storage with its step run in
  // chunks (Note [Embed step in chunks] in sched/schedule_spec.h).
  bool embed_optim_on_host = true;
};

// Saved activations (docs/design.md §6, SSDTrain), vertical only. Per block the backward either
// recomputes the block's forward from its checkpoint ("recompute", the default), or reads the
// tensors the forward saved: kept on the device ("keep"), or offloaded to `tier` ("offload") and
// prefetched back; "auto" keeps, offloads or recomputes each block from the memory budget and the
// measured compute time and storage bandwidth, and says why in the log.
struct ActivationConfig {
  ActsMode policy = ActsMode::recompute;  // "recompute" | "keep" | "offload" | "auto"
  ActsTier tier = ActsTier::storage;      // where "offload" puts them: "storage" | "host"
};

struct TrainConfig {
  ModelConfig model;
  OptimConfig optim;
  IoConfig io;
  MemoryConfig memory;
  OffloadConfig offload;
  ActivationConfig activations;
  int64_t batch_size = 8;  // B, sequences per micro-batch
  int64_t seq_len = 128;   // T, at most model.context_length
  int64_t grad_accum = 1;  // micro-batches per optimizer step
  int64_t steps = 800;     // optimizer steps (the embedded default trains ~1 minute on 2 cores)
  int64_t seed = 1337;
  int64_t log_every = 10;
  std::string data_train = "embedded";  // "embedded" (generated corpus) or a token file path
  // Validation (docs/design.md §10): "" (none), "embedded" (held-out generated text, another
  // seed than the training corpus) or a token file path, read in data.format. Its loss over the
  // first eval_batches (B, T) batches is taken every eval_every steps (0: never) and after the
  // last step, with the weights of that step.
  std::string data_val;
  int64_t eval_every = 0;
  int64_t eval_batches = 4;
  // Every sample_every steps (0: never) `strata train` logs sample_tokens tokens generated from a
  // newline by the current weights (Note [Sampling] in model/sample.h; temperature 1, seed
  // train.seed, so runs are comparable).
  int64_t sample_every = 0;
  int64_t sample_tokens = 64;
  TokenFormat data_format = TokenFormat::auto_detect;  // "auto" | "llmc" | "raw_u16"
  Schedule schedule = Schedule::in_memory;             // "in_memory" | "horizontal" | "vertical"
  // "f32" (default: working weights are the f32 master) or "bf16" (working weights rounded to
  // bf16, stored and moved as bf16 by the offloaded schedules; Note [Precision modes]).
  Precision precision = Precision::f32;
  // "f32" (default) or "bf16": the blocks' GEMMs take bf16 operands (the bf16 working weights and
  // the activations rounded to bf16) and accumulate in f32, on tensor cores on a GPU (Note [bf16
  // GEMMs] in model/block.h). Needs precision "bf16".
  MatmulPrecision matmul = MatmulPrecision::f32;
  // Where compute runs: "cpu" (default), "cuda" (docs/design.md §5.9), or "cpu-discrete": the
  // CPU with a device memory of its own that its kernels alone read, crossed only by copies, as
  // on a GPU (docs/design.md §3), so the discrete path runs everywhere; bit-identical to "cpu".
  DeviceKind device = DeviceKind::cpu;
  // Where a data-parallel run's ranks sum their gradients (Note [Collectives on device memory] in
  // dist/device_collectives.h): "host" (over MPI on host memory: the in-memory schedule copies
  // its gradient out and back in, the offloaded ones reduce-scatter a block's after it left the
  // device and gather its params before it goes), "device" (in device memory: NCCL on a GPU, MPI
  // on the CPU devices; the offloaded schedules move only each rank's shards between host and
  // device, Note [ZeRO-3 on the device] in sched/schedule_spec.h) or "auto" (default): on the
  // device where the build and the machine allow (NCCL built, a GPU per rank), but for the
  // offloaded schedules on the CPU devices (no gain there), else on the host
  // (wants_device_collectives in train/trainer.h). The bits are the same either way.
  CollectivesPlace collectives = CollectivesPlace::automatic;
  // The ranks of a data-parallel run (Note [Data parallel ranks] in dist/communicator.h): set by
  // `strata train` from its launcher (mpirun -np N), never read from or written to a config file.
  // Each rank trains grad_accum micro-batches of a step's ranks x grad_accum.
  int32_t ranks = 1;
};

// The embedded default, with every key (it is config_to_json(TrainConfig{})).
nlohmann::json default_config_json();

// Reads a JSON file (// and /* */ comments allowed). Errors: not_found naming the path when it
// does not exist; bad_format with path, line, column and the parser's reason when malformed or
// nested deeper than kMaxJsonDepth (Note [Bounded JSON nesting] in core/json_util.h).
Result<nlohmann::json> read_json_file(const std::string& path);

// Deep-merges overlay into base. Every key of overlay must exist in base, and its JSON type must
// match the base value's (object, string, bool, number; an integer where base has an integer);
// strings must be UTF-8 without NUL, and overlay no deeper than kMaxJsonDepth.
// Errors are invalid_argument and name the dotted key and `source`, e.g.
//   "unknown key 'train.lrr' in run.json"
//   "train.steps must be an integer, got 2.5 in --set train.steps=2.5"
// On error base may be partly merged; callers discard it.
Status merge_config(nlohmann::json& base, const nlohmann::json& overlay, const std::string& source);

// Applies one "a.b=value" override. The value is parsed as JSON when the key names a number,
// bool or object; a string key takes the text as written (so data.train=123 is the path "123";
// a quoted JSON string is unquoted). Then merged as above, with source "--set a.b=value".
Status apply_set(nlohmann::json& base, const std::string& assignment);

// Converts and validates. j may be partial: it is merged over the default first (source
// "config"). Every value is range-checked, sizes derived from several within the bounds of Note
// [Config bounds] (core/config_bounds.h). Errors are invalid_argument and name the field and
// value at fault.
Result<TrainConfig> parse_config(const nlohmann::json& j);

// train.matmul bf16 needs train.precision bf16 (its GEMMs read the bf16 working weights): the one
// statement of that rule, which parse_config and the trainers (for configs built in code) apply.
Status check_matmul_needs_bf16_weights(const TrainConfig& c);

// The first field in which two models differ, as (key "model.n_embd", value in a, value in b),
// the values as JSON text; nullopt when they are the same model.
struct FieldDifference {
  std::string key, a, b;
};
std::optional<FieldDifference> model_difference(const ModelConfig& a, const ModelConfig& b);

// The inverse of parse_config: parse_config(config_to_json(c)) gives c back exactly.
nlohmann::json config_to_json(const TrainConfig& c);

}  // namespace strata
