// Upper bounds on the config's integers and on the sizes that follow from them.
//
// Note [Config bounds]
// Every integer of the config is range-checked before anything uses it (a key's own bound is its
// row in Note [The config's field table], core/config.h), and the sizes that follow from several
// keys are computed in checked 64-bit arithmetic (checked_mul, checked_add: core/math_util.h)
// and bounded too. A value beyond a bound is a one-line invalid_argument naming the fields and the
// bound (exit 2), never a wrapped size, an abort or an allocation of a size the user chose. The
// bounds are far above any model trained today and low enough that every byte size Strata derives
// from them fits in int64 with a factor of 4 to spare, so code after parse_config multiplies sizes
// without checks. The layout (model/layout.cpp) sums its sizes in checked arithmetic anyway and
// treats an overflow as a bug: a config within these bounds cannot reach one. The comments on the
// constants below say what each bound protects.
#pragma once

#include <cstdint>

#include "core/config.h"
#include "core/status.h"

namespace strata {

inline constexpr int64_t kMaxVocabSize = int64_t{1} << 20;  // Llama 3: 128256; tokens are int32
// model.context_length, model.n_embd, model.ffn_hidden, model.n_layer: far above today's models.
// A context is the model's (Llama 3.1: 131072), not what a run allocates: training sizes by
// train.seq_len, sampling by its window (Note [Sampling]); only GPT-2's wpe is context-sized.
inline constexpr int64_t kMaxContextLength = int64_t{1} << 20;
inline constexpr int64_t kMaxEmbd = int64_t{1} << 16;
inline constexpr int64_t kMaxFfnHidden = int64_t{1} << 20;
inline constexpr int64_t kMaxLayers = 4096;
// The layout's elements, padding included: params, grads, m and v in f32 take at most 16 TiB.
inline constexpr int64_t kMaxParameterElems = int64_t{1} << 40;
// batch_size x seq_len x grad_accum: the step's int32 inputs and targets take at most 2 GiB.
inline constexpr int64_t kMaxTokensPerStep = int64_t{1} << 28;
// An upper bound of the activations of one step, all blocks and micro-batches (check_step_bounds),
// and of an evaluation's residuals: no schedule keeps more.
inline constexpr int64_t kMaxStepActivationBytes = int64_t{1} << 60;
// n_layer x grad_accum for the offloaded schedules: the plans hold about 12 KB of tasks and slots
// per (block, micro-batch) pair (at 2^18 pairs, 64 tiny blocks x 4096 micro-batches, `strata
// train` peaked at 3.2 GB of RSS and took 8 s to start, measured).
inline constexpr int64_t kMaxPlanBlockMicroBatches = int64_t{1} << 18;
// train.steps, optim.warmup_steps, train.eval_every: exact in the LR schedule's doubles.
inline constexpr int64_t kMaxSteps = int64_t{1} << 53;
// An evaluation keeps every batch's (B, T, C) residual between blocks (Trainer::evaluate), so
// its host memory grows with the count. Each sampled token is a forward over the window.
inline constexpr int64_t kMaxEvalBatches = int64_t{1} << 16;
inline constexpr int64_t kMaxSampleTokens = int64_t{1} << 16;
// The engines' limits (io/block_engine.cpp; ints there); a block or stripe unit fits an
// io_uring length.
inline constexpr int64_t kMaxIoQueueDepth = 4096;
inline constexpr int64_t kMaxIoWorkers = 64;
inline constexpr int64_t kMaxIoBlockBytes = int64_t{1} << 30;
inline constexpr int64_t kMaxIoDirs = 256;
inline constexpr int64_t kMaxLoraRank = int64_t{1} << 16;  // also at most each matrix's size
inline constexpr int64_t kMaxLoraNames = 64;

// The bounds of Note [Config bounds] on a config whose fields are otherwise valid (parse_config
// calls it last). Also for configs that code rewrote after parsing (--auto, the planner's
// candidates). invalid_argument naming the fields and the bound.
Status check_config_bounds(const TrainConfig& c);

}  // namespace strata
