// The offloaded trainer's validation loss: a forward pass alone, block by block over every batch
// (the vertical order: each block's weights read once), outside plans, through memory the plans
// leave idle between steps. Trainer::evaluate in train/trainer.h.
#include <cstring>
#include <vector>

#include "core/targets.h"
#include "model/lm_head.h"
#include "sched/slot_names.h"
#include "train/offload_trainer.h"

namespace strata {

namespace names = slot_names;

Result<double> OffloadTrainer::evaluate(const int32_t* inputs, const int32_t* targets,
                                        int64_t batches) {
  STRATA_RETURN_IF_ERROR(finish());  // the weights after the last step
  Stream& s = *streams_.compute;
  const OffloadWorkspace& ws = actions_->workspace();
  const int64_t B = shape_.cfg.batch_size, T = shape_.cfg.seq_len, BT = B * T,
                C = shape_.cfg.model.n_embd;
  // Device: the embed group's params; one block's f32 weights (the first params buffer, or in
  // bf16 mode the workspace's widened scratch); the block's input and output in the workspace's
  // backward buffers (idle in a forward); the tokens slot; the head's buffers.
  float* embed = state_->slot(names::kEmbedParams).buf.f32();
  float* weights = shape_.bf16 ? ws.params_f32 : state_->slot(names::kParamsBuf.at(0)).buf.f32();
  float* x = ws.recompute_out;                                     // (B, T, C)
  float* y = ws.dinp;                                              // (B, T, C)
  int32_t* tokens = state_->slot(names::kTokensDevice).buf.i32();  // (2, B, T): inputs, targets
  // Host: one block's working weights as f32, and every batch's residual between blocks.
  std::vector<float> host_weights(static_cast<size_t>(shape_.block_elems));  // (block elems)
  std::vector<float> residual(static_cast<size_t>(batches * BT * C));        // (batches, B, T, C)

  const EmbedView e = embed_slab_view(shape_.layout, embed);
  for (int64_t b = 0; b < batches; ++b) {
    dev_.copy(s, tokens, inputs + b * BT, BT * 4);
    dev_.embedding_forward(s, x, tokens, e.wte, e.wpe, B, T, C);
    dev_.copy(s, residual.data() + b * BT * C, x, BT * C * 4);
    s.synchronize();
  }
  for (int64_t l = 0; l < shape_.cfg.model.n_layer; ++l) {
    STRATA_RETURN_IF_ERROR(state_->read_block_params(l, host_weights.data()));
    dev_.copy(s, weights, host_weights.data(), shape_.block_elems * 4);
    const BlockView w = block_slab_view(shape_.layout, weights, l);
    // bf16 GEMMs: their weights, the widened ones narrowed back (exact: they are bf16 values)
    // into the first params buffer, bf16 in bf16 mode and idle between steps.
    bf16_t* narrow = static_cast<bf16_t*>(state_->slot(names::kParamsBuf.at(0)).buf.data());
    const std::optional<BlockGemm> gemm = actions_->block_gemm(narrow);
    if (gemm) dev_.convert_f32_to_bf16(s, narrow, weights, shape_.block_elems);
    for (int64_t b = 0; b < batches; ++b) {
      float* r = residual.data() + b * BT * C;
      dev_.copy(s, x, r, BT * C * 4);
      block_forward(dev_, s, y, ws.acts, x, w, shape_.dims, gemm ? &*gemm : nullptr);
      dev_.copy(s, r, y, BT * C * 4);
      s.synchronize();
    }
  }
  // The head, as a training step's (act<head_loss>), forward only.
  const FinalView fin = final_slab_view(shape_.layout, embed + shape_.embed_slab_elems);
  std::vector<float> losses(static_cast<size_t>(BT));  // (B, T)
  double total = 0;
  for (int64_t b = 0; b < batches; ++b) {
    dev_.copy(s, x, residual.data() + b * BT * C, BT * C * 4);
    dev_.copy(s, tokens + BT, targets + b * BT, BT * 4);
    lm_head_forward(dev_, s, ws.head, x, e, fin, tokens + BT, shape_.cfg.model, BT);
    dev_.copy(s, losses.data(), ws.head.losses, BT * 4);
    s.synchronize();
    double sum = 0;  // in position order, as a training step's loss
    for (float v : losses) sum += v;
    total += sum / static_cast<double>(BT);
  }
  return counted_mean(total / static_cast<double>(batches), batches * BT,
                      counted_targets(targets, batches * BT));
}

}  // namespace strata
