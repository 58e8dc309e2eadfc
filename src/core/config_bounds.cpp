// Note [Config bounds] in config_bounds.h.
#include "core/config_bounds.h"

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "core/config_fields.h"
#include "core/math_util.h"
#include "core/status.h"

namespace strata {

namespace {

std::string power_text(int64_t bound) {
  std::string s = std::to_string(bound);
  if (bound >= 1024 && (bound & (bound - 1)) == 0) {
    s += " (2^" + std::to_string(63 - __builtin_clzll(static_cast<uint64_t>(bound))) + ")";
  }
  return s;
}

Status check_in(const std::string& key, int64_t v, int64_t lo, int64_t hi) {
  if (v >= lo && v <= hi) return Status::ok_status();
  return invalid_argument(key + " must be in [" + std::to_string(lo) + ", " + power_text(hi) +
                          "], got " + std::to_string(v));
}

// The product of factors, or nullopt beyond int64.
std::optional<int64_t> product(std::initializer_list<int64_t> factors) {
  std::optional<int64_t> p = 1;
  for (int64_t f : factors) {
    if (p) p = checked_mul(*p, f);
  }
  return p;
}

std::optional<int64_t> sum(std::initializer_list<std::optional<int64_t>> terms) {
  std::optional<int64_t> s = 0;
  for (const auto& t : terms) {
    s = s && t ? checked_add(*s, *t) : std::nullopt;
  }
  return s;
}

std::optional<int64_t> times(std::optional<int64_t> a, std::optional<int64_t> b) {
  return a && b ? checked_mul(*a, *b) : std::nullopt;
}

// At least the elements make_param_layout lays out: each tensor is padded to 16 elements and
// each slab to 2048 (model/layout.h), so padding adds at most 16 per tensor and 2048 per slab.
std::optional<int64_t> param_elems_bound(const ModelConfig& m) {
  // GPT-2: wte and wpe; 12 C^2 + 13 C per block; the final LayerNorm. Llama: wte; q|k|v, o,
  // gate|up, down and two gains per block; the final gain and an untied head. n_head and
  // n_kv_head are already within their bounds, so the widths below cannot overflow.
  const int64_t C = m.n_embd, F = m.ffn(), W = C + 2 * m.kv_width();
  const bool llama = m.arch == ModelArch::llama;
  const auto embed =
      sum({product({m.vocab_size + (llama ? 0 : m.context_length), C}), 2 * 16 + 2048});
  const auto block =
      llama ? sum({product({W + C, C}), product({3, C, F}), product({2, C}), 12 * 16 + 2048})
            : sum({product({12, C, C}), product({13, C}), 12 * 16 + 2048});
  const auto final_ =
      sum({product({m.tie_embeddings ? 0 : m.vocab_size, C}), product({2, C}), 3 * 16 + 2048});
  return sum({embed, times(block, m.n_layer), final_});
}

// "(train.batch_size 8 x train.seq_len 128 x train.grad_accum 2)".
std::string factors_text(std::initializer_list<std::pair<const char*, int64_t>> fields) {
  std::string s = "(";
  for (const auto& [name, v] : fields) {
    if (s.size() > 1) s += " x ";
    s += std::string(name) + " " + std::to_string(v);
  }
  return s + ")";
}

// Each key's own bound, from its row (Note [The config's field table]): an integer's [min, max]
// where it has a max, a list's length.
Status check_field_bounds(const TrainConfig& c) {
  return config_fields::for_each_field(
      c, [](const std::string& key, const auto& rule, const char*, const auto& v) -> Status {
        using Rule = std::decay_t<decltype(rule)>;
        if constexpr (std::is_same_v<Rule, config_fields::Ints>) {
          if (rule.max != std::numeric_limits<int64_t>::max()) {
            return check_in(key, v, rule.min, rule.max);
          }
        } else if constexpr (std::is_same_v<Rule, config_fields::Paths>) {
          if (static_cast<int64_t>(v.size()) > rule.max_count) {
            return invalid_argument(key + " lists " + std::to_string(v.size()) +
                                    " directories, more than " + std::to_string(rule.max_count));
          }
        } else if constexpr (std::is_same_v<Rule, config_fields::Names>) {
          if (static_cast<int64_t>(v.size()) > rule.max_count) {
            return invalid_argument(key + " lists " + std::to_string(v.size()) +
                                    " names, more than " + std::to_string(rule.max_count));
          }
        }
        return Status::ok_status();
      });
}

// After check_field_bounds, which the sums here and below rely on: the bounds that are other
// keys, then the sizes.
Status check_model_bounds(const ModelConfig& m) {
  STRATA_RETURN_IF_ERROR(check_in("model.n_head", m.n_head, 1, m.n_embd));
  STRATA_RETURN_IF_ERROR(check_in("model.n_kv_head", m.n_kv_head, 0, m.n_head));
  const int64_t C = m.n_embd;
  const auto elems = param_elems_bound(m);
  if (!elems || *elems > kMaxParameterElems) {
    return invalid_argument("the model (model.n_layer " + std::to_string(m.n_layer) +
                            ", model.n_embd " + std::to_string(C) + ", model.vocab_size " +
                            std::to_string(m.vocab_size) + ", model.context_length " +
                            std::to_string(m.context_length) + ") has more than " +
                            power_text(kMaxParameterElems) + " parameter elements");
  }
  return Status::ok_status();
}

Status check_step_bounds(const TrainConfig& c) {
  const int64_t B = c.batch_size, T = c.seq_len, M = c.grad_accum, L = c.model.n_layer;
  STRATA_RETURN_IF_ERROR(check_in("train.seq_len", T, 1, c.model.context_length));
  const auto tokens = product({B, T, M});
  if (!tokens || *tokens > kMaxTokensPerStep) {
    return invalid_argument(
        "tokens per step " +
        factors_text({{"train.batch_size", B}, {"train.seq_len", T}, {"train.grad_accum", M}}) +
        " exceed the bound of " + power_text(kMaxTokensPerStep));
  }
  // An upper bound of what one block keeps per micro-batch (activations, saved attention state
  // and backward scratch, model/block.h), for all blocks and micro-batches of a step.
  const int64_t C = c.model.n_embd, NH = c.model.n_head;
  // Llama adds its MLP width F and the repeated q|k|v: at most 6F more per position.
  const auto per_block =
      sum({product({B, T, 32 * C + 6 * c.model.ffn() + 4}), product({2, B, NH, T, T})});
  const auto bytes = times(per_block, product({4, L, M}));
  if (!bytes || *bytes > kMaxStepActivationBytes) {
    return invalid_argument("the activations of one step " +
                            factors_text({{"model.n_layer", L},
                                          {"train.grad_accum", M},
                                          {"train.batch_size", B},
                                          {"train.seq_len", T}}) +
                            ", with model.n_embd " + std::to_string(C) + " and model.n_head " +
                            std::to_string(NH) + ", exceed the bound of " +
                            power_text(kMaxStepActivationBytes) + " bytes");
  }
  if (is_offloaded(c.schedule) && L * M > kMaxPlanBlockMicroBatches) {  // L, M <= 2^28: no overflow
    return invalid_argument(std::string("train.schedule ") + enum_name(c.schedule) + " plans " +
                            factors_text({{"model.n_layer", L}, {"train.grad_accum", M}}) +
                            " (block, micro-batch) pairs, above the bound of " +
                            power_text(kMaxPlanBlockMicroBatches) +
                            " (raise train.batch_size instead of train.grad_accum)");
  }
  const auto eval_bytes = product({c.eval_batches, B, T, C, 4});
  if (!eval_bytes || *eval_bytes > kMaxStepActivationBytes) {
    return invalid_argument("the evaluation's residuals " +
                            factors_text({{"train.eval_batches", c.eval_batches},
                                          {"train.batch_size", B},
                                          {"train.seq_len", T},
                                          {"model.n_embd", C}}) +
                            " x 4 bytes exceed the bound of " +
                            power_text(kMaxStepActivationBytes) + " bytes");
  }
  return Status::ok_status();
}

}  // namespace

Status check_config_bounds(const TrainConfig& c) {
  STRATA_RETURN_IF_ERROR(check_field_bounds(c));
  STRATA_RETURN_IF_ERROR(check_model_bounds(c.model));
  return check_step_bounds(c);
}

}  // namespace strata
