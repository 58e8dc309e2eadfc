// strata export: a checkpoint's weights as a Hugging Face GPT-2 model (model.safetensors with
// HF names and layout, plus HF's config.json beside it), for loading in other tools.
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/config.h"
#include "core/log.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/hf_names.h"
#include "model/layout.h"

namespace strata::cli {

namespace {

namespace fs = std::filesystem;

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// Writes text to path through a temporary file and a rename, so an interrupted export never
// leaves a truncated config.json next to a complete model.
Status write_text_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    f.flush();
    if (!f) return io_error(tmp + ": cannot write");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return io_error(path + ": rename from " + tmp + ": " + ec.message());
  return Status();
}

// The checkpoint's model file, checked against the parameter table of its config: every HF
// tensor present, F32, with HF's shape, and nothing else (an extra tensor means the config and
// the weights disagree about the model). Returns the tensors in layout order, moved out of `st`.
Result<std::vector<StTensor>> hf_tensors_of(SafeTensors& st, const ParamLayout& layout,
                                            const std::string& config_path) {
  std::map<std::string, StTensor*> by_name;
  for (StTensor& t : st.tensors) by_name[t.name] = &t;
  std::vector<StTensor> out;
  out.reserve(layout.tensors.size());
  for (int64_t i = 0; i < static_cast<int64_t>(layout.tensors.size()); ++i) {
    const HfTensor h = hf_tensor(layout, i);
    auto it = by_name.find(h.name);
    if (it == by_name.end()) {
      return bad_format(st.path + ": tensor '" + h.name + "' is missing (the model of " +
                        config_path + " has it)");
    }
    StTensor& t = *it->second;
    if (t.dtype != StDType::f32) {
      return bad_format(st.path + ": tensor '" + h.name + "' is " + st_dtype_name(t.dtype) +
                        ", expected F32");
    }
    if (t.shape != h.shape) {
      return bad_format(st.path + ": tensor '" + h.name + "' has shape " + shape_text(t.shape) +
                        ", expected " + shape_text(h.shape) + " for the model of " + config_path);
    }
    out.push_back(std::move(t));
    by_name.erase(it);
  }
  if (!by_name.empty()) {
    return bad_format(st.path + ": tensor '" + by_name.begin()->first +
                      "' is not a parameter of the model of " + config_path);
  }
  return out;
}

}  // namespace

int cmd_export(const std::vector<std::string>& args) {
  auto parsed = parse_args(args, {{"checkpoint", true, false}, {"out", true, false}}, "export");
  if (!parsed.ok()) return fail(parsed.status().message(), 2);
  if (!parsed->has("checkpoint") || !parsed->has("out")) {
    return fail("strata export: --checkpoint DIR and --out FILE.safetensors are both required", 2);
  }
  const std::string out_path = parsed->get("out");
  // A run's checkpoint root stands for its newest complete step, as for resuming.
  auto resolved = resolve_checkpoint(parsed->get("checkpoint"));
  if (!resolved.ok()) return fail(resolved.status().message(), 2);
  const std::string dir = *resolved;

  // The weights come from the bytes the manifest vouched for, so a torn or corrupted checkpoint
  // is refused here rather than exported as plausible-looking weights.
  auto model = read_checkpoint_safetensors(dir, "model.safetensors");
  if (!model.ok()) return fail(model.status().message(), 2);

  const std::string config_path = (fs::path(dir) / "config.json").string();
  auto json = read_json_file(config_path);
  if (!json.ok()) return fail(json.status().message(), 2);
  auto cfg = parse_config(*json);
  if (!cfg.ok()) return fail(config_path + ": " + cfg.status().message(), 2);
  const ParamLayout layout = make_param_layout(cfg->model);

  auto tensors = hf_tensors_of(*model, layout, config_path);
  if (!tensors.ok()) return fail(tensors.status().message(), 2);

  // HF's config.json goes beside the weights; if that directory were the checkpoint itself, the
  // export would overwrite the checkpoint's own model.safetensors or config.json.
  fs::path out_dir = fs::path(out_path).parent_path();
  if (out_dir.empty()) out_dir = ".";
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return fail(out_dir.string() + ": cannot create directory: " + ec.message(), 2);
  if (fs::equivalent(out_dir, dir, ec)) {
    return fail(
        "--out " + out_path + " is inside the checkpoint " + dir + "; export to another directory",
        2);
  }
  const std::string hf_config_path = (out_dir / "config.json").string();

  SafeTensors hf;
  hf.tensors = std::move(*tensors);
  // transformers' loader refuses safetensors files without format "pt" in the metadata.
  hf.metadata["format"] = "pt";
  // A full disk is the user's to fix (2), as in `strata train`; other write failures are 1.
  Status s = write_safetensors(out_path, hf);
  if (!s.ok()) return fail(s.message(), s.code() == ErrorCode::no_space ? 2 : 1);
  s = write_text_atomic(hf_config_path, hf_config_json(cfg->model));
  if (!s.ok()) return fail(s.message(), 1);

  log_info("exported " + std::to_string(layout.parameter_count) + " parameters (" +
           std::to_string(layout.tensors.size()) + " tensors) of checkpoint " + dir + " to " +
           out_path + " and " + hf_config_path);
  return 0;
}

}  // namespace strata::cli
