// Upper bounds on the config's integers and on the sizes that follow from them.
//
// Note [Config bounds]
// Every integer of the config is range-checked before anything uses it, and the sizes that
// follow from several of them are computed in checked 64-bit arithmetic (checked_mul and
// checked_add, core/math_util.h) and bounded as well. The bounds are far above any model trained
// today and low enough that every byte size Strata derives from them fits in int64 with room to
// spare (a factor of 4 at least), so code after parse_config multiplies sizes without checks. A
// value beyond a bound is a one-line invalid_argument naming the fields and the bound (exit 2),
// never a wrapped size, an abort, or an allocation of a size the user chose (`train.grad_accum =
// 2^62` used to wrap to "0 tokens/step" and crash; 2^40 died of bad_alloc).
//
// The bounds (values in the constants below; a key's own bound is its row's rule, Note [The
// config's field table] in core/config.h):
//  - model.vocab_size <= 65536: tokens are uint16 on disk;
//  - model.context_length, model.n_embd <= 2^16; model.n_layer <= 4096;
//  - parameter elements (the layout, padding included) <= 2^40: params, grads, m and v in f32
//    are then at most 16 TiB;
//  - tokens per step, batch_size x seq_len x grad_accum, <= 2^28: the step's int32 inputs and
//    targets take at most 2 GiB;
//  - the activation bytes of one step, all blocks and micro-batches, bounded above by
//    4 L M (B T (32 C + 4) + 2 B NH T^2) (model/block.h: activations, attention state, backward
//    scratch), <= 2^60: no schedule keeps more;
//  - n_layer x grad_accum <= 2^18 for the offloaded schedules: the plans hold about 12 KB of
//    tasks and slots per (block, micro-batch) pair (`strata train` peaked at 3.2 GB of RSS and
//    took 8 s to start at 2^18 pairs, 64 tiny blocks x 4096 micro-batches, measured);
//  - train.steps, optim.warmup_steps, train.eval_every <= 2^53: exact in the LR schedule's
//    doubles; train.eval_batches <= 2^16: an evaluation keeps every batch's (B, T, C) residual
//    between blocks (Trainer::evaluate), so its host memory grows with the count;
//    train.sample_tokens <= 2^16 (each one a forward over the window);
//  - io.queue_depth <= 4096 and io.workers <= 64 (the engines' limits, io/block_engine.cpp; they
//    are ints there), io.block_size and io.stripe_unit <= 1 GiB (a block fits an io_uring
//    length), io.dirs at most 256 entries.
// The layout (model/layout.cpp) sums its sizes with the same checked arithmetic and treats an
// overflow as a bug: a config within these bounds cannot reach one.
#pragma once

#include <cstdint>

#include "core/config.h"
#include "core/status.h"

namespace strata {

inline constexpr int64_t kMaxVocabSize = int64_t{1} << 20;  // Llama 3: 128256; tokens are int32
inline constexpr int64_t kMaxContextLength = int64_t{1} << 16;
inline constexpr int64_t kMaxEmbd = int64_t{1} << 16;
inline constexpr int64_t kMaxFfnHidden = int64_t{1} << 20;
inline constexpr int64_t kMaxLayers = 4096;
inline constexpr int64_t kMaxParameterElems = int64_t{1} << 40;
inline constexpr int64_t kMaxTokensPerStep = int64_t{1} << 28;
inline constexpr int64_t kMaxStepActivationBytes = int64_t{1} << 60;
inline constexpr int64_t kMaxPlanBlockMicroBatches = int64_t{1} << 18;
inline constexpr int64_t kMaxSteps = int64_t{1} << 53;
inline constexpr int64_t kMaxEvalBatches = int64_t{1} << 16;
inline constexpr int64_t kMaxSampleTokens = int64_t{1} << 16;
inline constexpr int64_t kMaxIoQueueDepth = 4096;
inline constexpr int64_t kMaxIoWorkers = 64;
inline constexpr int64_t kMaxIoBlockBytes = int64_t{1} << 30;
inline constexpr int64_t kMaxIoDirs = 256;

// The bounds of Note [Config bounds] on a config whose fields are otherwise valid (parse_config
// calls it last). Also for configs that code rewrote after parsing (--auto, the planner's
// candidates). invalid_argument naming the fields and the bound.
Status check_config_bounds(const TrainConfig& c);

}  // namespace strata
