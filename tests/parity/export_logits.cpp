// Strata's logits for the weights of a Hugging Face export, the C++ half of the export check
// (tests/export_torch.sh; tools/torch_export_check.py runs the same tokens through PyTorch).
//
// usage: export_logits --checkpoint DIR --exported FILE.safetensors --out LOGITS.safetensors
//
// The model shape comes from DIR/config.json (the Strata config the checkpoint was trained
// with); the weights from FILE, read back through from_hf_layout, so a wrong name, shape or
// transpose in the export shows up as logits that disagree with PyTorch's. The weights must also
// equal, bit for bit, those load_checkpoint reads from DIR (what a resumed run would train on).
// OUT holds "tokens" (I32, (B, T)), "targets" (I32, (B, T)), "logits" (F32, (B, T, V)) and
// "loss" (F32, ()). Exit status 2 for bad arguments or input files, 1 for failures while running.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/config.h"
#include "core/rng.h"
#include "formats/checkpoint.h"
#include "formats/safetensors.h"
#include "model/hf_names.h"
#include "model/layout.h"
#include "train/in_memory_trainer.h"

using namespace strata;

namespace {

constexpr const char* kUsage =
    "usage: export_logits --checkpoint DIR --exported FILE.safetensors --out LOGITS.safetensors";

int fail(const std::string& message, int code) {
  std::fprintf(stderr, "export_logits: error: %s\n", message.c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  std::string checkpoint, exported, out;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return fail(flag + " needs a value; " + kUsage, 2);
    const std::string value = argv[++i];
    if (flag == "--checkpoint") {
      checkpoint = value;
    } else if (flag == "--exported") {
      exported = value;
    } else if (flag == "--out") {
      out = value;
    } else {
      return fail("unknown flag " + flag + "; " + kUsage, 2);
    }
  }
  if (checkpoint.empty() || exported.empty() || out.empty()) return fail(kUsage, 2);

  const std::string config_path = (std::filesystem::path(checkpoint) / "config.json").string();
  auto json = read_json_file(config_path);
  if (!json.ok()) return fail(json.status().message(), 2);
  auto parsed = parse_config(*json);
  if (!parsed.ok()) return fail(config_path + ": " + parsed.status().message(), 2);
  TrainConfig cfg = *parsed;
  // InMemoryTrainer sizes its batch from the config; a small fixed batch keeps the comparison
  // cheap and independent of how the run was trained. No budget: this is not a memory test.
  const int64_t B = 2, T = std::min<int64_t>(16, cfg.model.context_length);
  const int64_t V = cfg.model.vocab_size;
  cfg.batch_size = B;
  cfg.seq_len = T;
  cfg.grad_accum = 1;
  cfg.schedule = Schedule::in_memory;
  cfg.memory.device_bytes = 0;

  auto st = read_safetensors(exported);
  if (!st.ok()) return fail(st.status().message(), 2);
  const ParamLayout layout = make_param_layout(cfg.model);
  std::vector<float> params(static_cast<size_t>(layout.total_elems), 0.0f);  // padding stays 0
  for (int64_t i = 0; i < static_cast<int64_t>(layout.tensors.size()); ++i) {
    const HfTensor h = hf_tensor(layout, i);
    auto values = st->get_f32(h.name, h.shape);
    if (!values.ok()) return fail(values.status().message(), 2);
    const ParamTensor& t = layout.tensors[static_cast<size_t>(i)];
    from_hf_layout(t, values->data(), params.data() + t.offset);
  }

  // The export must carry the checkpoint's weights bit for bit: compare with what resuming from
  // the checkpoint would load (load_checkpoint reads it independently of `strata export`).
  std::vector<float> resumed(params.size(), 0.0f);
  auto meta = load_checkpoint(checkpoint, cfg, [&](int64_t slab, const SlabPieceFn& fill) {
    const Slab& s = layout.slabs[static_cast<size_t>(slab)];
    std::vector<float> m(static_cast<size_t>(s.numel)), v(m.size());  // (slab numel), unused
    return fill({0, s.numel, resumed.data() + s.offset, m.data(), v.data()});
  });
  if (!meta.ok()) return fail(meta.status().message(), 2);
  for (const ParamTensor& t : layout.tensors) {
    if (std::memcmp(params.data() + t.offset, resumed.data() + t.offset,
                    static_cast<size_t>(t.numel()) * sizeof(float)) != 0) {
      return fail(exported + ": tensor " + t.name + " differs from checkpoint " + checkpoint, 1);
    }
  }

  // Tokens over the whole vocabulary from a fixed seed, not the training corpus: every row of
  // wte then takes part, and the check does not depend on the data the run saw.
  Rng rng(20240607);
  std::vector<int32_t> tokens(static_cast<size_t>(B * T)), targets(tokens.size());
  for (auto& x : tokens) x = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(V));
  for (auto& x : targets) x = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(V));

  auto device = create_cpu_device();
  auto trainer = InMemoryTrainer::create(*device, cfg);
  if (!trainer.ok()) return fail(trainer.status().message(), 1);
  (*trainer)->write_params(params.data());
  (*trainer)->zero_grads();
  const float loss =
      static_cast<float>((*trainer)->forward_backward(tokens.data(), targets.data(), 1.0f));
  std::vector<float> logits(static_cast<size_t>(B * T * V));
  (*trainer)->read_logits(logits.data());

  SafeTensors result;
  result.add_i32("tokens", {B, T}, tokens.data());
  result.add_i32("targets", {B, T}, targets.data());
  result.add_f32("logits", {B, T, V}, logits.data());
  result.add_f32("loss", {}, &loss);
  result.metadata["checkpoint"] = checkpoint;
  result.metadata["exported"] = exported;
  Status s = write_safetensors(out, result);
  if (!s.ok()) return fail(s.message(), 1);
  return 0;
}
