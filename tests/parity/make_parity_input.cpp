// Writes the input of the PyTorch parity check (tools/torch_parity.py reads it): a tiny GPT-2's
// initial weights as Strata initialises them, ten batches of the generated corpus, the training
// hyperparameters, and a standalone AdamW case. See tests/parity_torch.sh. With "lora", the
// model carries rank-4 adapters on every linear layer (Note [LoRA] in model/lora.h), their B
// drawn nonzero so that every adapter has a gradient at step 0, and Llama's with adapter dropout
// 0.1 (Note [Adapter dropout]); tools/torch_lora.py reads it. With "masked", `targets_mask`
// (steps, B, T) leaves out each row's first targets, as a chat prompt's (Note [Ignored targets]
// in core/targets.h), and the whole of step 0's first row.
#include <cstdio>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/rng.h"
#include "data/byte_tokenizer.h"
#include "data/synthetic_corpus.h"
#include "formats/safetensors.h"
#include "model/init.h"
#include "model/layout.h"

using namespace strata;

namespace {

std::string num(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", x);  // round-trips a float exactly
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  bool llama = false, lora = false, masked = false, bad = argc < 2;
  for (int i = 2; i < argc; i++) {
    const std::string a = argv[i];
    (a == "llama" ? llama : a == "lora" ? lora : a == "masked" ? masked : bad) = true;
  }
  if (bad) {
    std::fprintf(stderr, "usage: parity_make_input OUT.safetensors [llama] [lora] [masked]\n");
    return 2;
  }
  ModelConfig m;
  m.vocab_size = 256;
  m.context_length = 64;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_embd = 64;
  if (llama) {
    // Every Llama feature at once: grouped-query attention, an MLP width that is not 4C, an
    // untied head, a non-default norm epsilon and theta, and llama3 frequency scaling whose
    // original context (32) splits the 8 frequencies of a 16-wide head into all three bands.
    m.arch = ModelArch::llama;
    m.n_kv_head = 2;
    m.ffn_hidden = 96;
    m.rope_theta = 5000;
    m.norm_eps = 1e-6;
    m.tie_embeddings = false;
    m.rope_scaling.type = RopeScalingKind::llama3;
    m.rope_scaling.factor = 4;
    m.rope_scaling.low_freq_factor = 1;
    m.rope_scaling.high_freq_factor = 4;
    m.rope_scaling.original_context_length = 32;
  }
  const int64_t B = 4, T = 64, steps = 10;

  SafeTensors st;
  st.metadata = {
      {"arch", enum_name(m.arch)},
      {"n_kv_head", num(m.kv_heads())},
      {"ffn_hidden", num(m.ffn())},
      {"rope_theta", num(m.rope_theta)},
      {"norm_eps", num(m.norm_eps)},
      {"tie_embeddings", m.tie_embeddings ? "1" : "0"},
      {"rope_scaling", m.rope_scaling.type == RopeScalingKind::llama3 ? "llama3" : "none"},
      {"rope_factor", num(m.rope_scaling.factor)},
      {"rope_low_freq_factor", num(m.rope_scaling.low_freq_factor)},
      {"rope_high_freq_factor", num(m.rope_scaling.high_freq_factor)},
      {"rope_original_context_length", num(m.rope_scaling.original_context_length)},
      {"n_layer", num(m.n_layer)},
      {"n_head", num(m.n_head)},
      {"n_embd", num(m.n_embd)},
      {"vocab_size", num(m.vocab_size)},
      {"context_length", num(m.context_length)},
      {"B", num(B)},
      {"T", num(T)},
      {"steps", num(steps)},
      {"lr", num(3e-3f)},
      {"min_lr_ratio", num(0.1f)},
      {"warmup_steps", num(2)},
      {"weight_decay", num(0.1f)},
      {"beta1", num(0.9f)},
      {"beta2", num(0.95f)},
      {"eps", num(1e-8f)},
      {"grad_clip", num(1.0f)},
      {"adamw_lr", num(1e-2f)},
      {"adamw_wd", num(0.1f)},
      {"adamw_beta1", num(0.9f)},
      {"adamw_beta2", num(0.95f)},
      {"adamw_eps", num(1e-8f)},
  };

  LoraConfig lc;
  if (lora) {
    lc.rank = 4;
    lc.alpha = 8;
    st.metadata["lora_rank"] = num(lc.rank);
    st.metadata["lora_alpha"] = num(lc.alpha);
    // The adapters' gradient norm runs 0.44-0.66 here: a tighter clip keeps clipping tested.
    st.metadata["grad_clip"] = num(0.5f);
    if (llama) {  // Note [Adapter dropout]: Llama's fixture drops 10% of each adapter's input
      st.metadata["lora_dropout"] = "0.1";
      st.metadata["seed"] = "4242";
    }
  }
  const ParamLayout layout = make_param_layout(m, lc);
  std::vector<float> params(static_cast<size_t>(layout.total_elems));
  init_params(layout, params.data(), 1337);
  Rng b_rng(7);
  for (const ParamTensor& t : layout.tensors) {
    if (!t.lora_b) continue;
    for (int64_t i = 0; i < t.numel(); i++) {
      params[static_cast<size_t>(t.offset + i)] = static_cast<float>(0.05 * b_rng.next_normal());
    }
  }
  for (const ParamTensor& t : layout.tensors) {
    st.add_f32(t.name, t.shape.dims, params.data() + t.offset);
  }

  // tokens (steps, B, T+1): step k's inputs are [:, :T], its targets [:, 1:].
  const std::vector<uint16_t> corpus = byte_tokenize(synthetic_corpus(1 << 16, 7));
  std::vector<int32_t> tokens(static_cast<size_t>(steps * B * (T + 1)));
  for (size_t i = 0; i < tokens.size(); i++) tokens[i] = corpus[i];
  st.add_i32("tokens", {steps, B, T + 1}, tokens.data());
  if (masked) {
    std::vector<int32_t> mask(static_cast<size_t>(steps * B * T));  // (steps, B, T) 1: counts
    for (int64_t k = 0; k < steps; k++) {
      for (int64_t b = 0; b < B; b++) {
        const int64_t prompt = k == 0 && b == 0 ? T : (7 * k + 3 * b + 2) % (T / 2);
        for (int64_t t = 0; t < T; t++)
          mask[static_cast<size_t>((k * B + b) * T + t)] = t >= prompt;
      }
    }
    st.add_i32("targets_mask", {steps, B, T}, mask.data());
  }

  const int64_t n = 1000, K = 3;
  Rng rng(99);
  std::vector<float> p0(n), grads(K * n);
  for (auto& x : p0) x = static_cast<float>(rng.next_normal());
  for (auto& x : grads) x = static_cast<float>(0.1 * rng.next_normal());
  st.add_f32("adamw.param0", {n}, p0.data());
  st.add_f32("adamw.grads", {K, n}, grads.data());

  Status s = write_safetensors(argv[1], st);
  if (!s.ok()) {
    std::fprintf(stderr, "parity_make_input: %s\n", s.to_string().c_str());
    return 1;
  }
  return 0;
}
