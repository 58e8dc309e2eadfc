// `strata sample`: text from a checkpoint's weights, or a Hugging Face model directory's (--model),
// (Note [Sampling] in model/sample.h). A checkpoint is verified first; its master weights are read
// tensor by tensor from model.safetensors as each slab is needed, so a model larger than memory
// samples too. The text is written to stdout as it is made (Note [Sample output]).
//
// Note [Sample output]
// The prompt, then each new token as soon as it is picked, is written to stdout with write(2), no
// buffer in between: as text (Note [Streaming text] in data/text_stream.h) or as ids with
// --print-tokens; a newline ends it. A failed write (a full disk) ends the command with one line
// naming stdout, exit 1; a closed pipe (EPIPE) is a stop by SIGPIPE, one line and 141. The first
// SIGINT, SIGTERM or SIGHUP (Note [Stopping on a signal]: sample polls per token, as training
// does per step) ends it after the token being made: what was made is written, the newline too,
// exit 128 + the signal.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/gathered_checkpoint.h"
#include "cli/stop_signals.h"
#include "core/file_util.h"
#include "core/log.h"
#include "data/text_stream.h"
#include "data/tokenizer.h"
#include "formats/checkpoint.h"
#include "formats/checkpoint_tensors.h"
#include "formats/hf_export.h"
#include "formats/hf_import.h"
#include "formats/lora_merge.h"
#include "model/layout.h"
#include "model/sample.h"

namespace strata::cli {

namespace {

// Slab `slab`'s master weights from a verified checkpoint's model.safetensors, converted from
// Hugging Face's layout (padding between tensors zero). A LoRA checkpoint (Note [LoRA]) is read
// as its base model with each targeted weight merged as it is read (Note [Merged export]): no
// file is written, and host memory holds one base matrix and its adapter beside the slab.
class CheckpointWeights {
 public:
  static Result<CheckpointWeights> open(const HfExportPlan& plan) {
    STRATA_ASSIGN_OR_RETURN(ReadOnlyFile f,
                            ReadOnlyFile::open(plan.weights_path, "checkpoint file"));
    return CheckpointWeights(plan, std::move(f));
  }
  Status read(int64_t slab, float* dst) {
    const Slab& s = layout_.slabs.at(static_cast<size_t>(slab));
    std::fill_n(dst, s.numel, 0.0f);
    for (int64_t i = s.first_tensor; i < s.first_tensor + s.tensor_count; ++i) {
      const ParamTensor& t = layout_.tensors[static_cast<size_t>(i)];
      const int64_t at = plan_.layout.find(t.name);  // its index among the checkpoint's tensors
      if (at < 0) return bad_format(plan_.weights_path + ": no tensor " + t.hf_name);
      float* out = dst + (t.offset - s.offset);
      const LoraMergeSource& src = merges_[static_cast<size_t>(at)];
      if (!src.merges()) {
        scratch_.resize(std::max(scratch_.size(), static_cast<size_t>(t.numel())));  // (numel)
        STRATA_RETURN_IF_ERROR(read_hf_tensor(file_, plan_.tensors[static_cast<size_t>(at)],
                                              plan_.layout, at, out, scratch_.data()));
        continue;
      }
      STRATA_RETURN_IF_ERROR(
          read_merged_tensor(file_, plan_.tensors, plan_.layout, at, src, merge_));
      // merge_.w is in HF's layout: (in, out) for a Conv1D weight, which Strata holds (out, in).
      const int64_t rows = t.shape.dims[0], cols = t.shape.dims[1];
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          out[r * cols + c] = t.hf_transposed ? merge_.w[static_cast<size_t>(c * rows + r)]
                                              : merge_.w[static_cast<size_t>(r * cols + c)];
        }
      }
    }
    return Status();
  }

 private:
  CheckpointWeights(const HfExportPlan& plan, ReadOnlyFile f)
      : plan_(plan),
        layout_(make_param_layout(plan.model)),
        merges_(lora_merge_sources(plan.layout)),
        file_(std::move(f)) {}
  const HfExportPlan& plan_;
  ParamLayout layout_;                   // the base model's: what the sampler runs
  std::vector<LoraMergeSource> merges_;  // by plan_.layout index
  LoraMergeBuffers merge_;
  ReadOnlyFile file_;
  std::vector<float> scratch_;
};

// A flag's number, or a one-line error naming the flag.
Result<double> number_flag(const ParsedArgs& a, const std::string& flag, double fallback, double lo,
                           double hi) {
  if (!a.has(flag)) return fallback;
  const std::string text = a.get(flag);
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(v >= lo && v <= hi)) {
    char range[64];
    std::snprintf(range, sizeof range, "[%g, %g]", lo, hi);
    return invalid_argument("--" + flag + " must be a number in " + range + ", got '" + text + "'");
  }
  return v;
}

// --prompt-tokens "1 2 3": token ids; anything else is refused naming the flag.
Result<std::vector<int32_t>> parse_token_list(const std::string& text) {
  std::vector<int32_t> out;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    char* end = nullptr;
    const long v = std::strtol(word.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > 65535) {
      return invalid_argument("--prompt-tokens takes token ids separated by spaces, got '" + word +
                              "'");
    }
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

// Half the memory the kernel reports available (MemAvailable in /proc/meminfo): the default
// for --resident-bytes, so sampling keeps a model that fits and streams one that does not. 0
// (stream) when it cannot be read.
int64_t half_available_memory() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return 0;
  char line[256];
  long long kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
  }
  std::fclose(f);
  return kb > 0 ? static_cast<int64_t>(kb) * 1024 / 2 : 0;
}

// The generation flags: --tokens, --temperature, --top-k, --seed, --no-kv-cache,
// --resident-bytes. invalid_argument naming the flag.
Result<SampleOptions> sample_options(const ParsedArgs& a) {
  SampleOptions o;
  auto tokens = number_flag(a, "tokens", 64, 0, 1 << 20);
  auto temperature = number_flag(a, "temperature", 1.0, 0, 100);
  auto top_k = number_flag(a, "top-k", 0, 0, 65536);
  auto seed = number_flag(a, "seed", 1337, 0, 9007199254740992.0);
  for (const auto* r : {&tokens, &temperature, &top_k, &seed}) {
    if (!r->ok()) return r->status();
  }
  o.new_tokens = static_cast<int64_t>(*tokens);
  o.temperature = *temperature;
  o.top_k = static_cast<int64_t>(*top_k);
  o.seed = static_cast<uint64_t>(*seed);
  o.kv_cache = !a.has("no-kv-cache");
  o.resident_bytes = half_available_memory();
  if (a.has("resident-bytes")) {
    auto bytes = parse_byte_size("resident-bytes", a.get("resident-bytes"));
    if (!bytes.ok()) return bytes.status();
    o.resident_bytes = static_cast<int64_t>(std::min<uint64_t>(*bytes, INT64_MAX));
  }

  return o;
}

bool g_stdout_closed = false;  // a write to stdout failed with EPIPE: its reader left

// All of `bytes` to stdout, retrying interrupted and short writes (Note [Sample output]);
// io_error naming stdout.
Status write_stdout(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(STDOUT_FILENO, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EPIPE) g_stdout_closed = true;
    if (n <= 0) {
      return io_error("cannot write the sample to stdout: " +
                      (n < 0 ? errno_text(errno) : std::string("nothing written")));
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return Status();
}

// Note [Sample output]: the prompt, then each new token, as text or (--print-tokens) ids.
class SampleWriter {
 public:
  SampleWriter(const Tokenizer& t, bool ids) : ids_(ids), text_(t, write_stdout) {}
  Status add(std::span<const int32_t> ids) {
    if (!ids_) return text_.push(ids);
    std::string words;
    for (int32_t id : ids) words += (count_++ == 0 ? "" : " ") + std::to_string(id);
    return write_stdout(words);
  }
  Status finish() {
    if (!ids_) STRATA_RETURN_IF_ERROR(text_.finish());
    return write_stdout("\n");
  }

 private:
  const bool ids_;
  int64_t count_ = 0;  // ids written
  TextStream text_;
};

// A failed write's exit (Note [Sample output]): a closed stdout is a stop by SIGPIPE.
int write_failed(const Status& s, int64_t made, int64_t asked) {
  if (!g_stdout_closed) return fail(s.message(), 1);
  log_info("stopped by SIGPIPE (stdout was closed) after " + std::to_string(made) + " of " +
           std::to_string(asked) + " tokens");
  return 128 + SIGPIPE;
}

// Slab `slab` of the model's weights into dst: from a checkpoint, or a Hugging Face directory.
using SlabRead = std::function<Status(int64_t slab, float* dst)>;

// Generates the sample into stdout as it is made (Note [Sample output]); the exit status.
int write_sample(const ModelConfig& model, const SlabRead& read, const Tokenizer& tokenizer,
                 const std::vector<int32_t>& prompt, const SampleOptions& o, bool print_ids) {
  if (Status s = check_prompt(model, prompt); !s.ok()) return fail(s.message(), 2);
  install_stop_signals();
  stop_at_step_boundaries();  // a signal ends the sample after the token being made
  SampleWriter writer(tokenizer, print_ids);
  if (Status s = writer.add(prompt); !s.ok()) return write_failed(s, 0, o.new_tokens);
  Status write_error;  // the output's, told from the model's
  int64_t made = 0;
  SampleHooks hooks;
  hooks.on_token = [&](int32_t token) {
    ++made;
    write_error = writer.add(std::span<const int32_t>(&token, 1));
    return write_error;
  };
  hooks.stop = [] { return stop_signal() != 0; };
  auto dev = create_cpu_device();
  auto out = generate(*dev, model, read, prompt, o, hooks);
  if (!write_error.ok()) return write_failed(write_error, made - 1, o.new_tokens);
  if (!out.ok()) return fail(out.status().message(), exit_status_for(out.status(), Stage::running));
  if (Status s = writer.finish(); !s.ok()) return write_failed(s, made, o.new_tokens);
  const int sig = stop_signal();
  if (sig == 0 || made == o.new_tokens) return 0;
  log_info(std::string("stopped by ") + signal_name(sig) + " after " + std::to_string(made) +
           " of " + std::to_string(o.new_tokens) + " tokens");
  return 128 + sig;
}

const std::vector<FlagSpec> kSampleFlags = {
    {"checkpoint", true, false},     {"model", true, false},
    {"prompt", true, false},         {"prompt-tokens", true, false},
    {"tokens", true, false},         {"temperature", true, false},
    {"top-k", true, false},          {"seed", true, false},
    {"print-tokens", false, false},  {"no-kv-cache", false, false},
    {"resident-bytes", true, false}, {"tokenizer", true, false},
    {"special-tokens", false, false}};

// What is sampled: the model, where its slabs come from, and the tokenizer it was trained with
// (a directory, or "" when none is known).
struct SampleSource {
  ModelConfig model;
  std::string tokenizer_dir;
  std::string tokenizer_whose;  // for the log: "the base model's", "the model's own"
  SlabRead read;                // owns the reader behind it
};

// --checkpoint DIR: verified first (a sharded one gathered beside it); the tokenizer it carries,
// else its base model's when that directory still holds one (Note [Checkpoint tokenizer]).
Result<SampleSource> checkpoint_source(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string dir, resolve_checkpoint(path));
  STRATA_ASSIGN_OR_RETURN(
      HfReadableCheckpoint readable,
      HfReadableCheckpoint::open(dir, std::filesystem::path(dir).parent_path().string()));
  auto kept = std::make_shared<std::pair<HfReadableCheckpoint, HfExportPlan>>(std::move(readable),
                                                                              HfExportPlan{});
  STRATA_ASSIGN_OR_RETURN(kept->second, plan_hf_export(kept->first.dir()));
  STRATA_ASSIGN_OR_RETURN(CheckpointWeights w, CheckpointWeights::open(kept->second));
  auto weights = std::make_shared<CheckpointWeights>(std::move(w));
  // The weights read through kept's plan: the reader holds both.
  const HfExportPlan& plan = kept->second;
  return SampleSource{
      plan.model, tokenizer_dir_of(plan.tokenizer_files),
      plan.tokenizer_copied ? "the checkpoint's copy" : "the base model's",
      [kept, weights](int64_t slab, float* dst) { return weights->read(slab, dst); }};
}

// --model HF_DIR: a Hugging Face model directory, checked as an import is; its own tokenizer
// files when it has them.
Result<SampleSource> model_source(const std::string& dir) {
  STRATA_ASSIGN_OR_RETURN(HfImportPlan plan, plan_hf_import(dir));
  STRATA_ASSIGN_OR_RETURN(HfSlabReader r, HfSlabReader::open(plan));
  auto reader = std::make_shared<HfSlabReader>(std::move(r));
  std::string tokenizer;
  for (const char* f : {"tokenizer.json", "tokenizer.model"}) {
    if (tokenizer.empty() && std::filesystem::is_regular_file(std::filesystem::path(dir) / f)) {
      tokenizer = dir;
    }
  }
  return SampleSource{plan.model, tokenizer, "the model's own",
                      [reader](int64_t slab, float* dst) { return reader->read(slab, dst); }};
}

int sample_main(const ParsedArgs& a) {
  if (a.has("checkpoint") == a.has("model")) {
    return fail("strata sample: give --checkpoint DIR or --model HF_DIR (one of them)", 2);
  }
  if (a.has("prompt") && a.has("prompt-tokens")) {
    return fail("--prompt and --prompt-tokens are exclusive: give the text or its token ids", 2);
  }
  auto options = sample_options(a);
  if (!options.ok()) return fail(options.status().message(), 2);
  const SampleOptions& o = *options;

  auto source =
      a.has("checkpoint") ? checkpoint_source(a.get("checkpoint")) : model_source(a.get("model"));
  if (!source.ok()) return fail(source.status().message(), 2);
  const ModelConfig& model = source->model;
  // Text in and out through the tokenizer (byte-level by default); --prompt-tokens skips it in.
  // Unless told, the model's own tokenizer when one is known, else the byte tokenizer.
  std::string tokenizer_path = a.get("tokenizer", "byte");
  if (!a.has("tokenizer") && !source->tokenizer_dir.empty()) {
    tokenizer_path = source->tokenizer_dir;
    log_info("tokenizer: " + source->tokenizer_whose + ", " + tokenizer_path);
  }
  const bool byte_default = !a.has("tokenizer") && tokenizer_path == "byte";
  // --special-tokens: a tokenizer.json's added tokens in the prompt are theirs (chat markers).
  auto tokenizer =
      load_tokenizer(tokenizer_path, TokenizerOptions{.special_tokens = a.has("special-tokens")});
  if (!tokenizer.ok()) return fail(tokenizer.status().message(), 2);
  const bool text_used = !a.has("prompt-tokens") || !a.has("print-tokens");
  if (byte_default && text_used && model.vocab_size > (*tokenizer)->vocab_size()) {
    // Its ids past 255 are no bytes: read as bytes, the prompt would be wrong and the output
    // invalid UTF-8.
    return fail("the model has " + std::to_string(model.vocab_size) +
                    " tokens (model.vocab_size), the default byte tokenizer 256: give its "
                    "--tokenizer (tokenizer.json, x.model or a model directory), or "
                    "--prompt-tokens with --print-tokens",
                2);
  }
  if ((*tokenizer)->vocab_size() > model.vocab_size) {
    return fail("the tokenizer " + (*tokenizer)->name() + " has " +
                    std::to_string((*tokenizer)->vocab_size()) + " tokens, more than the model's " +
                    std::to_string(model.vocab_size) +
                    " (model.vocab_size): give its --tokenizer, or --prompt-tokens",
                2);
  }
  std::vector<int32_t> prompt;
  if (a.has("prompt-tokens")) {
    auto ids = parse_token_list(a.get("prompt-tokens"));
    if (!ids.ok()) return fail(ids.status().message(), 2);
    prompt = *ids;
  } else {
    auto ids = (*tokenizer)->encode(a.has("prompt") ? a.get("prompt") : std::string("\n"));
    if (!ids.ok()) return fail(ids.status().message(), 2);
    prompt = *ids;
  }
  return write_sample(model, source->read, **tokenizer, prompt, o, a.has("print-tokens"));
}

}  // namespace

int cmd_sample(const std::vector<std::string>& args) {
  return run_command(args, kSampleFlags, "sample", sample_main);
}

}  // namespace strata::cli
