#include "model/hf_names.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/check.h"

namespace strata {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

HfTensor hf_tensor(const ParamLayout& layout, int64_t index) {
  const ParamTensor& t = layout.tensors.at(static_cast<size_t>(index));
  HfTensor h;
  h.shape = t.shape.dims;
  if (t.name == "wte.weight" || t.name == "wpe.weight") {
    h.name = t.name;
    return h;
  }
  if (t.name.rfind("lnf.", 0) == 0) {
    h.name = "ln_f." + t.name.substr(4);
    return h;
  }
  // "blk.{l}.{part}.{weight|bias}"
  STRATA_CHECK(t.name.rfind("blk.", 0) == 0);
  const size_t dot = t.name.find('.', 4);
  const std::string layer = t.name.substr(4, dot - 4);
  const std::string rest = t.name.substr(dot + 1);  // "attn_qkv.weight"
  const size_t dot2 = rest.find('.');
  const std::string part = rest.substr(0, dot2), kind = rest.substr(dot2 + 1);
  std::string hf;
  if (part == "ln1")
    hf = "ln_1";
  else if (part == "ln2")
    hf = "ln_2";
  else if (part == "attn_qkv")
    hf = "attn.c_attn";
  else if (part == "attn_proj")
    hf = "attn.c_proj";
  else if (part == "mlp_fc")
    hf = "mlp.c_fc";
  else if (part == "mlp_proj")
    hf = "mlp.c_proj";
  STRATA_CHECK_MSG(!hf.empty(), ("no Hugging Face name for " + t.name).c_str());
  h.name = "h." + layer + "." + hf + "." + kind;
  if (kind == "weight" && part != "ln1" && part != "ln2") {
    h.transposed = true;
    std::swap(h.shape[0], h.shape[1]);
  }
  return h;
}

namespace {
// out (cols, rows) <- in (rows, cols)
void transpose(const float* in, float* out, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
  }
}
bool is_conv1d_weight(const ParamTensor& t) {
  return t.shape.rank() == 2 && t.name.rfind("blk.", 0) == 0 && ends_with(t.name, ".weight");
}
}  // namespace

void to_hf_layout(const ParamTensor& t, const float* strata, float* hf) {
  if (is_conv1d_weight(t)) {
    transpose(strata, hf, t.shape.dims[0], t.shape.dims[1]);
  } else {
    std::copy(strata, strata + t.numel(), hf);
  }
}

void from_hf_layout(const ParamTensor& t, const float* hf, float* strata) {
  if (is_conv1d_weight(t)) {
    transpose(hf, strata, t.shape.dims[1], t.shape.dims[0]);
  } else {
    std::copy(hf, hf + t.numel(), strata);
  }
}

std::string hf_config_json(const ModelConfig& c) {
  const nlohmann::json j = {{"model_type", "gpt2"},       {"architectures", {"GPT2LMHeadModel"}},
                            {"vocab_size", c.vocab_size}, {"n_positions", c.context_length},
                            {"n_ctx", c.context_length},  {"n_embd", c.n_embd},
                            {"n_layer", c.n_layer},       {"n_head", c.n_head},
                            {"n_inner", nullptr},         {"activation_function", "gelu_new"},
                            {"layer_norm_epsilon", 1e-5}, {"tie_word_embeddings", true},
                            {"resid_pdrop", 0.0},         {"embd_pdrop", 0.0},
                            {"attn_pdrop", 0.0},          {"torch_dtype", "float32"}};
  return j.dump(2) + "\n";
}

}  // namespace strata
