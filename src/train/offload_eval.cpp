// The offloaded trainer's validation loss: a forward pass alone, block by block over every batch
// (the vertical order: each block's weights read once), outside plans, through memory the plans
// leave idle between steps. Trainer::evaluate in train/trainer.h.
#include <cstring>
#include <vector>

#include "train/offload_internal.h"
#include "sched/slot_names.h"

namespace strata {

namespace names = slot_names;

Result<double> OffloadTrainer::evaluate(const int32_t* inputs, const int32_t* targets,
                                        int64_t batches) {
  STRATA_RETURN_IF_ERROR(finish());  // the weights after the last step
  Stream& s = *compute_;
  const int64_t B = cfg_.batch_size, T = cfg_.seq_len, BT = B * T, C = cfg_.model.n_embd;
  // Device: the embed group's params; one block's f32 weights (the first params buffer, or in
  // bf16 mode the workspace's widened scratch); the block's input and output in the workspace's
  // backward buffers (idle in a forward); the tokens slot; the head's buffers.
  float* embed = memory_.at(names::kEmbedParams)->buf.f32();
  float* weights = bf16_ ? ws_.params_f32 : memory_.at(names::kParamsBuf.at(0))->buf.f32();
  float* x = ws_.recompute_out;                                   // (B, T, C)
  float* y = ws_.dinp;                                            // (B, T, C)
  int32_t* tokens = memory_.at(names::kTokensDevice)->buf.i32();  // (2, B, T): inputs, targets
  // Host: one block's working weights as f32, and every batch's residual between blocks.
  std::vector<float> host_weights(static_cast<size_t>(block_elems_));  // (block elems)
  std::vector<float> residual(static_cast<size_t>(batches * BT * C));  // (batches, B, T, C)

  const EmbedView e = embed_slab_view(layout_, embed);
  for (int64_t b = 0; b < batches; ++b) {
    dev_.copy(s, tokens, inputs + b * BT, BT * 4);
    dev_.embedding_forward(s, x, tokens, e.wte, e.wpe, B, T, C);
    dev_.copy(s, residual.data() + b * BT * C, x, BT * C * 4);
    s.synchronize();
  }
  for (int64_t l = 0; l < cfg_.model.n_layer; ++l) {
    STRATA_RETURN_IF_ERROR(read_block_params(l, host_weights.data()));
    dev_.copy(s, weights, host_weights.data(), block_elems_ * 4);
    const BlockView w = block_slab_view(layout_, weights, l);
    // bf16 GEMMs: their weights, the widened ones narrowed back (exact: they are bf16 values)
    // into the first params buffer, bf16 in bf16 mode and idle between steps.
    bf16_t* narrow = static_cast<bf16_t*>(memory_.at(names::kParamsBuf.at(0))->buf.data());
    const std::optional<BlockGemm> gemm = block_gemm(narrow);
    if (gemm) dev_.convert_f32_to_bf16(s, narrow, weights, block_elems_);
    for (int64_t b = 0; b < batches; ++b) {
      float* r = residual.data() + b * BT * C;
      dev_.copy(s, x, r, BT * C * 4);
      block_forward(dev_, s, y, ws_.acts, x, w, dims_, gemm ? &*gemm : nullptr);
      dev_.copy(s, r, y, BT * C * 4);
      s.synchronize();
    }
  }
  // The head, as a training step's (do_head_loss), forward only.
  std::vector<float> losses(static_cast<size_t>(BT));  // (B, T)
  double total = 0;
  for (int64_t b = 0; b < batches; ++b) {
    dev_.copy(s, x, residual.data() + b * BT * C, BT * C * 4);
    dev_.copy(s, tokens + BT, targets + b * BT, BT * 4);
    head_forward(x, embed, tokens + BT);
    dev_.copy(s, losses.data(), ws_.losses, BT * 4);
    s.synchronize();
    double sum = 0;  // in position order, as a training step's loss
    for (float v : losses) sum += v;
    total += sum / static_cast<double>(BT);
  }
  return total / static_cast<double>(batches);
}

}  // namespace strata
