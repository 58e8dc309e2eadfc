// One naming scheme for the slots of the offloaded plans, shared by both generators and by the
// trainer that gives the slots memory. Slots with one name are one piece of memory in every plan
// of a run (state that outlives a plan: parameters, optimizer state, host gradients), so a name
// is a contract between plans; it is spelled here once.
//
// Scheme: "<what>.<where or role>[.blk<L>][.mb<M>][.p<P>]" for per-block state, and
// "<what>.<buffer kind><k>" for the double buffers and staging rings (k = 0, 1).
#pragma once

#include <cstdint>
#include <string>

namespace strata::slot_names {

inline std::string blk(int64_t l) {
  return ".blk" + std::to_string(l);
}
inline std::string blk_mb(int64_t l, int64_t m) {
  return blk(l) + ".mb" + std::to_string(m);
}

// Per block, living between plans.
inline std::string params_store(int64_t l) {  // working params, host or storage
  return "params.store" + blk(l);
}
// Optimizer state (master, m, v) of a block, or of one of its parts (Note [Optimizer split]).
inline std::string optim_store(int64_t l, int32_t part = -1) {
  return "optim.store" + blk(l) + (part >= 0 ? ".p" + std::to_string(part) : std::string());
}
// A block's part-0 state after a speculative step, until validated (Note [Speculative steps]).
inline std::string optim_spec(int64_t l) {
  return "optim.spec" + blk(l) + ".p0";
}
inline std::string grad_store(int64_t l) {  // a block's gradient until its step, host or storage
  return "grad.store" + blk(l);
}

// Per block (and micro-batch) within an iteration.
inline std::string ckpt(int64_t l) {  // horizontal: reused by every micro-batch
  return "ckpt" + blk(l);
}
inline std::string ckpt(int64_t l, int64_t m) {
  return "ckpt" + blk_mb(l, m);
}
inline std::string acts(int64_t l, int64_t m) {  // a saved activation set
  return "acts" + blk_mb(l, m);
}
inline std::string dact(int64_t m) {  // vertical: the gradient w.r.t. micro-batch m's activation
  return "dact.mb" + std::to_string(m);
}

// Double buffers and staging rings: "<stem><k>", k = 0, 1.
struct Ring {
  const char* stem;
  std::string at(int k) const { return stem + std::to_string(k); }
};
// Device double buffers.
inline constexpr Ring kParamsBuf{"params.buf"};     // a block's params
inline constexpr Ring kActBuf{"act.buf"};           // vertical: the forward's input
inline constexpr Ring kBwdInBuf{"bwd.in.buf"};      // the backward's input (checkpoint)
inline constexpr Ring kGradAccBuf{"grad.acc.buf"};  // vertical: a block's gradient accumulator
inline constexpr Ring kGradBuf{"grad.buf"};         // horizontal: one micro-batch's gradient
inline constexpr Ring kActsOutBuf{"acts.out.buf"};  // a saved set on its way off the device
inline constexpr Ring kActsInBuf{"acts.in.buf"};    // a saved set back for its backward
// Host staging rings, for what lives on storage (and the horizontal per-micro-batch gradient).
inline constexpr Ring kGradStage{"grad.stage"};        // horizontal: one micro-batch's gradient
inline constexpr Ring kGradWstage{"grad.wstage"};      // a gradient on its way to storage
inline constexpr Ring kGradRstage{"grad.rstage"};      // a gradient read back for its step
inline constexpr Ring kParamsStage{"params.stage"};    // params read toward the device
inline constexpr Ring kParamsWstage{"params.wstage"};  // new params on their way to storage
inline constexpr Ring kCkptStage{"ckpt.stage"};        // horizontal: both directions
inline constexpr Ring kCkptWstage{"ckpt.wstage"};
inline constexpr Ring kCkptRstage{"ckpt.rstage"};
inline constexpr Ring kOptimStage{"optim.stage"};  // slot 0 also stages the trainer's own I/O
inline constexpr Ring kActsWstage{"acts.wstage"};
inline constexpr Ring kActsRstage{"acts.rstage"};

// Single activation slots.
inline constexpr const char* kAct = "act";           // horizontal: updated in place
inline constexpr const char* kDact = "dact";         // horizontal: d of the current activation
inline constexpr const char* kLastOut = "last.out";  // vertical: the last block's output

// Slots every offloaded plan has.
inline constexpr const char* kTokensHost = "tokens.host";
inline constexpr const char* kTokensDevice = "tokens";
inline constexpr const char* kWorkspace = "compute.workspace";
inline constexpr const char* kEmbedParams = "embed.params";
inline constexpr const char* kEmbedGrad = "embed.grad";
inline constexpr const char* kEmbedGradHost = "embed.grad.host";
inline constexpr const char* kEmbedOptim = "embed.optim";
inline constexpr const char* kEmbedParamsHost = "embed.params.host";
inline constexpr const char* kGradSums = "grad.sums";
inline constexpr const char* kGradClip = "grad.clip";
inline constexpr const char* kLosses = "losses.host";

}  // namespace strata::slot_names
