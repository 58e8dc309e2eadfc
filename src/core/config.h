// Training configuration: the JSON a user writes, `--set key=value` overrides, and the validated
// structs the trainer reads.
//
// Flow: default_config_json() -> merge_config(file) -> apply_set(each --set) -> parse_config().
// Merging checks names and JSON types against the default (which holds every key), so a typo is
// an error naming the key instead of a silently ignored setting; parse_config() then checks
// values and the relations between them.
//
// Note [The config's field table]
// Every key of the config is one row X(Type, member, default, rule, "doc") of the lists
// below. The structs declare their members from the rows (plain aggregates, so TrainConfig{} is
// the default), and config.cpp walks the rows (for_each_field, core/config_fields.h) to read,
// write and check every key. The rule is the key's own check (Ints, Interval, Fraction, Text,
// Paths or Any, core/config_fields.h), applied by parse_config and check_config_bounds; the rules
// between keys are written out there. Only config_fields.h's users expand the rules, so this
// header needs none of their names. The doc line says what a user sets; the comment above a list
// says why. test_config checks README.md's config block against the default the rows give.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config_enums.h"
#include "core/status.h"

namespace strata {

#define STRATA_DECLARE_FIELD(Type, member, default_value, rule, doc) Type member = default_value;

// model.rope_scaling.*: Llama 3's rotary frequency scaling (HF rope_scaling with rope_type
// "llama3"); the only scaling Strata supports (model/rope.h). Its numbers count only for llama3.
#define STRATA_ROPE_SCALING_FIELDS(X)                                                 \
  X(RopeScalingKind, type, RopeScalingKind::none, Any(),                              \
    "none, or llama3: Llama 3's rotary frequency scaling")                            \
  X(double, factor, 8, Any(), "llama3: the low frequencies are divided by it")        \
  X(double, low_freq_factor, 1, Any(),                                                \
    "llama3: wavelengths above original_context_length / low_freq_factor are scaled") \
  X(double, high_freq_factor, 4, Any(),                                               \
    "llama3: wavelengths below original_context_length / high_freq_factor are kept")  \
  X(int64_t, original_context_length, 8192, Ints(),                                   \
    "llama3: the context length the model was trained at")

struct RopeScaling {
  STRATA_ROPE_SCALING_FIELDS(STRATA_DECLARE_FIELD)
};

// model.*: the model's shape. `arch` picks the block (Note [Llama blocks] in model/block.h); the
// fields after n_embd are Llama's and a GPT-2 model must leave them at their defaults (parse_config
// names the first one that is not). n_head's bound is n_embd, a rule between keys.
#define STRATA_MODEL_FIELDS(X)                                                                   \
  X(ModelArch, arch, ModelArch::gpt2, Any(), "the block: gpt2 or llama")                         \
  X(int64_t, vocab_size, 256, Ints(1, kMaxVocabSize), "tokens in the vocabulary")                \
  X(int64_t, context_length, 128, Ints(1, kMaxContextLength), "the longest sequence, in tokens") \
  X(int64_t, n_layer, 4, Ints(1, kMaxLayers), "transformer blocks")                              \
  X(int64_t, n_head, 4, Ints(1), "attention heads, dividing n_embd")                             \
  X(int64_t, n_embd, 128, Ints(1, kMaxEmbd), "the residual stream's width")                      \
  X(int64_t, n_kv_head, 0, Ints(0), "key/value heads (grouped-query attention); 0: n_head")      \
  X(int64_t, ffn_hidden, 0, Ints(0, kMaxFfnHidden), "the MLP's hidden width; 0: 4 * n_embd")     \
  X(double, rope_theta, 10000, Any(), "the rotary embeddings' base")                             \
  X(double, norm_eps, 1e-5, Any(), "RMSNorm's epsilon (GPT-2's LayerNorm: 1e-5, fixed)")         \
  X(bool, tie_embeddings, true, Any(), "the LM head is the token embedding (GPT-2: always)")

struct ModelConfig {
  STRATA_MODEL_FIELDS(STRATA_DECLARE_FIELD)
  RopeScaling rope_scaling;

  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t ffn() const { return ffn_hidden > 0 ? ffn_hidden : 4 * n_embd; }
  int64_t head_size() const { return n_embd / n_head; }
  int64_t kv_width() const { return kv_heads() * head_size(); }  // the k (or v) row: NKV * hs
};

// optim.*. alpha: GreedySnake's α split (docs/design.md §5.7): the fraction of each block's params
// whose optimizer step runs during the next iteration's forward, just before the block is fetched
// (vertical schedule); the rest (1 - α) runs during backward, overlapped with the backward of
// earlier blocks. nullopt is "auto": `strata train --profile HW.json` picks α from the planner's
// simulation of the run's own plans, and without a profile it is 1 (alpha_or_default()). With
// clipping on, the backward part runs speculatively (Note [Speculative steps] in
// sched/schedule_spec.h).
// speculation: whether a vertical step with clipping on and α < 1 speculates (runs part 0 in
// backward with the clip factor assumed 1, validated once the norm is known) or waits for the
// norm (both parts in the next forward): "auto" chooses per step from how often the norm clipped
// lately (train/speculation_policy.h). Bit-identical results either way.
#define STRATA_OPTIM_FIELDS(X)                                                                     \
  X(float, lr, 3e-3f, Interval('(', 0, kInf, ')'), "the peak learning rate, reached after warmup") \
  X(float, min_lr_ratio, 0.1f, Interval('[', 0, 1, ']'),                                           \
    "the cosine decay ends at lr * min_lr_ratio")                                                  \
  X(float, beta1, 0.9f, Interval('[', 0, 1, ')'), "AdamW's beta1")                                 \
  X(float, beta2, 0.95f, Interval('[', 0, 1, ')'), "AdamW's beta2")                                \
  X(float, eps, 1e-8f, Interval('(', 0, kInf, ')'), "AdamW's epsilon")                             \
  X(float, weight_decay, 0.1f, Interval('[', 0, kInf, ')'), "AdamW's decoupled weight decay")      \
  X(float, grad_clip, 1.0f, Interval('[', 0, kInf, ')'),                                           \
    "the largest global gradient norm; 0 turns clipping off")                                      \
  X(int64_t, warmup_steps, 40, Ints(0, kMaxSteps), "steps of linear warmup to lr")                 \
  X(std::optional<double>, alpha, std::nullopt, Fraction(),                                        \
    "vertical: the share of each step run in the next forward, in [0, 1], or auto")                \
  X(Speculation, speculation, Speculation::automatic, Any(),                                       \
    "vertical, clipping on, alpha < 1: speculate (on), wait for the norm (off), or auto")

struct OptimConfig {
  STRATA_OPTIM_FIELDS(STRATA_DECLARE_FIELD)
  double alpha_or_default() const { return alpha.value_or(1.0); }
};

// io.*: the storage engine and the striped store (docs/design.md §4). Used by `strata bench-io` and
// by the offloaded schedules.
#define STRATA_IO_FIELDS(X)                                                                      \
  X(IoEngineKind, engine, IoEngineKind::automatic, Any(),                                        \
    "the storage engine: auto, uring or posix")                                                  \
  X(int64_t, queue_depth, 32, Ints(1, kMaxIoQueueDepth),                                         \
    "requests in flight per ring / worker pool")                                                 \
  X(int64_t, block_size, 1 << 20, Ints(4096, kMaxIoBlockBytes, 4096),                            \
    "large requests are split into blocks of this size")                                         \
  X(int64_t, workers, 1, Ints(1, kMaxIoWorkers), "rings (io_uring) or threads (posix)")          \
  X(int64_t, read_bytes_per_s, 0, Ints(0), "a read rate limit, 0: none (emulates a slower SSD)") \
  X(int64_t, write_bytes_per_s, 0, Ints(0), "a write rate limit, 0: none")                       \
  X(std::string, faults, "", Text(), "a fault injection spec (io/fault_injector.h); \"\": off")  \
  X(std::vector<std::string>, dirs, {}, Paths(kMaxIoDirs), "storage directories, one per SSD")   \
  X(int64_t, stripe_unit, 1 << 20, Ints(4096, kMaxIoBlockBytes, 4096),                           \
    "the RAID-0 stripe unit across dirs")                                                        \
  X(bool, checksums, false, Any(), "CRC32C per stripe-unit chunk, verified on read")

struct IoConfig {
  STRATA_IO_FIELDS(STRATA_DECLARE_FIELD)
};

// memory.*: tier budgets (docs/design.md §3), in bytes; 0: no budget (the machine's memory). A run
// whose plan does not fit them is refused before step 1.
#define STRATA_MEMORY_FIELDS(X)                                                      \
  X(int64_t, device_bytes, 0, Ints(0), "the device memory budget in bytes, 0: none") \
  X(int64_t, host_bytes, 0, Ints(0), "the host memory budget in bytes, 0: none")

struct MemoryConfig {
  STRATA_MEMORY_FIELDS(STRATA_DECLARE_FIELD)
};

// offload.*: placement of the offloaded schedules: the fraction of blocks, each in [0, 1], whose
// state of that kind is kept in host memory between uses; the rest lives on storage (io.dirs), so
// any fraction below 1 needs io.dirs. The embedding group's optimizer state on storage is stepped
// in chunks (Note [Embed step in chunks] in sched/schedule_spec.h).
#define STRATA_OFFLOAD_FIELDS(X)                                                             \
  X(double, params_on_host, 0.0, Fraction(),                                                 \
    "the share of blocks whose working parameters stay in host memory")                      \
  X(double, optim_on_host, 0.0, Fraction(),                                                  \
    "the share of blocks whose optimizer state (master weights, m, v) stays in host memory") \
  X(double, checkpoints_on_host, 1.0, Fraction(),                                            \
    "the share of blocks whose input checkpoints stay in host memory")                       \
  X(double, grads_on_host, 0.0, Fraction(),                                                  \
    "the share of blocks whose f32 gradient stays in host memory until its step")            \
  X(bool, embed_optim_on_host, true, Any(),                                                  \
    "the embedding group's optimizer state in host memory (true) or on storage")

struct OffloadConfig {
  STRATA_OFFLOAD_FIELDS(STRATA_DECLARE_FIELD)
};

// activations.*: saved activations (docs/design.md §6, SSDTrain), vertical only. Per block the
// backward either recomputes the block's forward from its checkpoint ("recompute", the default), or
// reads the tensors the forward saved: kept on the device ("keep"), or offloaded to `tier`
// ("offload") and prefetched back; "auto" keeps, offloads or recomputes each block from the memory
// budget and the measured compute time and storage bandwidth, and says why in the log.
#define STRATA_ACTIVATION_FIELDS(X)                                                             \
  X(ActsMode, policy, ActsMode::recompute, Any(), "vertical: recompute, keep, offload or auto") \
  X(ActsTier, tier, ActsTier::storage, Any(), "where offload puts activations: storage or host")

struct ActivationConfig {
  STRATA_ACTIVATION_FIELDS(STRATA_DECLARE_FIELD)
};

// lora.*: LoRA fine-tuning (Note [LoRA] in model/lora.h): rank 0 trains every weight; a rank r
// adds (alpha / r) B A x to each targeted linear layer and freezes the base. targets and
// modules_to_save are Hugging Face module names; which exist, and the rank's bound, depend on
// model.arch and the matrices' sizes (checked by lora_targets in model/lora.h).
#define STRATA_LORA_FIELDS(X)                                                                  \
  X(int64_t, rank, 0, Ints(0, kMaxLoraRank), "the adapters' rank r; 0: full training")         \
  X(float, alpha, 16.0f, Interval('(', 0, kInf, ')'), "the adapters' scale is alpha / rank")   \
  X(double, dropout, 0.0, Fraction(), "dropout on an adapter's input; 0: none")                \
  X(std::vector<std::string>, targets, {"all-linear"}, Names(kMaxLoraNames),                   \
    "the linear layers adapted, as HF names them (q_proj, c_attn, ...), or all-linear")        \
  X(std::vector<std::string>, modules_to_save, {}, Names(kMaxLoraNames),                       \
    "modules trained in full beside the adapters: lm_head, embed_tokens (Llama), wte (GPT-2)") \
  X(BasePrecision, base_precision, BasePrecision::automatic, Any(),                            \
    "the frozen base: auto (the working precision), bf16, int8 or nf4")

struct LoraConfig {
  STRATA_LORA_FIELDS(STRATA_DECLARE_FIELD)
  bool enabled() const { return rank > 0; }
};

// train.*. precision bf16: the working weights are rounded to bf16, and stored and moved as bf16
// by the offloaded schedules (Note [Precision modes] in train/trainer.h). matmul bf16: the blocks'
// GEMMs take bf16 operands (the bf16 working weights and the activations rounded to bf16) and
// accumulate in f32, on tensor cores on a GPU (Note [bf16 GEMMs] in model/block.h).
// sample_every: `strata train` logs tokens generated from a newline by the current weights (Note
// [Sampling] in model/sample.h; temperature 1, seed train.seed, so runs are comparable).
#define STRATA_TRAIN_FIELDS(X)                                                                     \
  X(int64_t, batch_size, 8, Ints(1, kMaxTokensPerStep), "B, sequences per micro-batch")            \
  X(int64_t, seq_len, 128, Ints(1), "T, at most model.context_length")                             \
  X(int64_t, grad_accum, 1, Ints(1, kMaxTokensPerStep),                                            \
    "micro-batches per optimizer step (per rank)")                                                 \
  X(int64_t, steps, 800, Ints(0, kMaxSteps),                                                       \
    "optimizer steps (the default trains ~1 minute on 2 cores)")                                   \
  X(int64_t, seed, 1337, Ints(), "seeds the initial weights and the samples")                      \
  X(int64_t, log_every, 10, Ints(1), "steps between log lines")                                    \
  X(int64_t, eval_every, 0, Ints(0, kMaxSteps),                                                    \
    "steps between validation losses (0: after the last step only); needs data.val")               \
  X(int64_t, eval_batches, 4, Ints(1, kMaxEvalBatches), "batches of data.val per validation loss") \
  X(int64_t, sample_every, 0, Ints(0, kMaxSteps), "steps between logged samples (0: never)")       \
  X(int64_t, sample_tokens, 64, Ints(1, kMaxSampleTokens), "tokens per logged sample")             \
  X(Schedule, schedule, Schedule::in_memory, Any(),                                                \
    "in_memory, horizontal or vertical (docs/design.md §5)")                                       \
  X(Precision, precision, Precision::f32, Any(),                                                   \
    "the working weights: f32 (the master weights) or bf16 (Note [Precision modes])")              \
  X(MatmulPrecision, matmul, MatmulPrecision::f32, Any(),                                          \
    "the blocks' GEMM operands: f32, or bf16 (Note [bf16 GEMMs]; needs precision bf16)")

// The keys at the top level. device "cpu-discrete" is the CPU with a device memory of its own
// that its kernels alone read, crossed only by copies, as on a GPU (docs/design.md §3), so the
// discrete path runs everywhere; bit-identical to "cpu". "cuda": docs/design.md §5.9.
// collectives (Note [Collectives on device memory] in dist/device_collectives.h): "host" sums
// over MPI on host memory (the in-memory schedule copies its gradient out and back in, the
// offloaded ones reduce-scatter a block's after it left the device and gather its params before
// it goes); "device" in device memory (NCCL on a GPU, MPI on the CPU devices; the offloaded
// schedules move only each rank's shards between host and device, Note [ZeRO-3 on the device]
// in sched/schedule_spec.h); "auto" on the device where the build and the machine allow (NCCL
// built, a GPU per rank), but for the offloaded schedules on the CPU devices (no gain there),
// else on the host (wants_device_collectives in train/offload_spec.h). The bits are the same.
#define STRATA_TOP_FIELDS(X)                                                                     \
  X(DeviceKind, device, DeviceKind::cpu, Any(), "where compute runs: cpu, cuda or cpu-discrete") \
  X(CollectivesPlace, collectives, CollectivesPlace::automatic, Any(),                           \
    "where data-parallel ranks sum their gradients: auto, host or device")

// data.*, whose members are prefixed data_ in TrainConfig. data.val (docs/design.md §10): its
// loss over the first train.eval_batches (B, T) batches is taken every train.eval_every steps and
// after the last step, with the weights of that step. "embedded" is held-out generated text,
// another seed than the training corpus.
#define STRATA_DATA_FIELDS(X)                                                                   \
  X(std::string, data_train, "embedded", Text("\"embedded\" or token files"),                   \
    "the training tokens: embedded (a generated corpus), a token file, a glob or a comma list") \
  X(std::string, data_val, "", Text(),                                                          \
    "validation tokens: \"\" (none), embedded, or token files as data.train")                   \
  X(TokenFormat, data_format, TokenFormat::auto_detect, Any(),                                  \
    "the token files' format: auto (llm.c files only), llmc or raw_u16")                        \
  X(bool, data_shuffle, false, Any(),                                                           \
    "false: the files in order, front to back; true: files and batches shuffled per epoch")     \
  X(bool, data_pack, true, Any(),                                                               \
    "true: tokens run on across rows (llm.c); false: one JSONL example a row, padded")

struct TrainConfig {
  ModelConfig model;
  OptimConfig optim;
  IoConfig io;
  MemoryConfig memory;
  OffloadConfig offload;
  ActivationConfig activations;
  LoraConfig lora;
  STRATA_TRAIN_FIELDS(STRATA_DECLARE_FIELD)
  STRATA_TOP_FIELDS(STRATA_DECLARE_FIELD)
  STRATA_DATA_FIELDS(STRATA_DECLARE_FIELD)
  // The ranks of a data-parallel run (Note [Data parallel ranks] in dist/communicator.h): set by
  // `strata train` from its launcher (mpirun -np N), never read from or written to a config file.
  // Each rank trains grad_accum micro-batches of a step's ranks x grad_accum.
  int32_t ranks = 1;
};

#undef STRATA_DECLARE_FIELD

// The embedded default, with every key (it is config_to_json(TrainConfig{})).
nlohmann::json default_config_json();

// Reads a JSON file (// and /* */ comments allowed). Errors: not_found naming the path when it
// does not exist; bad_format with path, line, column and the parser's reason when malformed or
// nested deeper than kMaxJsonDepth (Note [Bounded JSON nesting] in core/json_util.h); bad_format
// naming the key when an object has a key twice (Note [Duplicate keys]).
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

// Every field in which two configs differ, in the field table's order, the values as bounded
// JSON text (Note [Bounded echoes]); the walk is the table's, so a new row is compared too.
std::vector<FieldDifference> config_differences(const TrainConfig& a, const TrainConfig& b);

// Whether `key` ("train.batch_size") names a row of the field table.
bool is_config_key(std::string_view key);

// Note [Resuming with changed fields]
// A resumed run reads data.train (as data.format) on from the checkpoint's data_position, in
// micro-batches of train.batch_size x train.seq_len, grad_accum x ranks of them per step: change
// one and the steps after the resume read other tokens than the run would have, so `strata train
// --resume` refuses it unless --allow-changes names it (grad_accum x ranks is what counts: 2
// ranks x 2 resumed as 1 x 4 read on). Any other field may change, each logged old -> new:
// train.steps, the learning rate; train.precision (a checkpoint holds the f32 masters whatever
// the precision, so either reads them); train.seed unless data.shuffle (it seeds the initial
// weights, which a resumed run takes from the checkpoint, the logged samples, and the shuffle's
// order: Note [Sharded corpora] in data/dataloader.h). The model may not change.
inline constexpr std::array<std::string_view, 8> kDataStreamKeys = {
    "train.batch_size", "train.seq_len", "train.grad_accum", "data.train",
    "data.format",      "data.shuffle",  "data.pack",        "train.seed"};
// The changes from a (a checkpoint's config, its ranks set) to b among kDataStreamKeys, in that
// order; train.grad_accum's values say the ranks when they differ ("2 x 2 ranks").
std::vector<FieldDifference> data_stream_changes(const TrainConfig& a, const TrainConfig& b);

// The inverse of parse_config: parse_config(config_to_json(c)) gives c back exactly.
nlohmann::json config_to_json(const TrainConfig& c);

}  // namespace strata
