// What every `strata` subcommand shares: its one-line errors and the reading of its flags.
#include "cli/commands.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/log.h"
#include "model/lora.h"

namespace strata::cli {

namespace {

const char* const kUsage =
    "usage: strata <command> [flags]\n"
    "\n"
    "commands:\n"
    "  train     train a model (bare: a tiny byte-level GPT on a built-in corpus, ~1 minute)\n"
    "            --config FILE  --set key=value ...  --device cpu|cuda|cpu-discrete\n"
    "            --metrics FILE  --trace FILE  --report FILE.html (needs --metrics)  --quiet\n"
    "            --save-every N --checkpoint-dir DIR [--keep K] [--save-sync]  --resume DIR\n"
    "            --allow-changes KEY[,KEY] (resume with a changed batch, seq_len, grad_accum,\n"
    "            data.*, or shuffled the seed: the run leaves the checkpoint's token stream)\n"
    "            --auto --profile HW.json (the planner picks schedule, B x M, placement, alpha)\n"
    "            --profile HW.json alone: optim.alpha \"auto\" is simulated with it\n"
    "            --init-from HF_DIR (start from a Hugging Face GPT-2 or Llama: config + weights)\n"
    "  prepare   turn a text file into tokens (llm.c .bin: uint16, or uint32 over 65536 ids)\n"
    "            --in TEXT --out FILE.bin  --tokenizer byte (default) | tokenizer.json | x.model\n"
    "            | DIR  --special-tokens (match a tokenizer.json's added tokens in the text)\n"
    "            --in X.jsonl (or --format jsonl): {text} | {prompt, completion} | {messages}\n"
    "            examples, and FILE.bin.mask: only completions and assistant turns train\n"
    "            --chat-template chatml | llama3 (how {messages} are rendered)\n"
    "  bench-io  measure the storage engine on one file\n"
    "            --dir DIR | --file PATH  --size 1G --block 1M --qd 32 --op read|write\n"
    "            --pattern seq|rand --engine auto|uring|posix --workers N --buffered\n"
    "            --config FILE --set io.read_bytes_per_s=... (the config's io section)\n"
    "  report    a run's metrics (and trace) as one HTML page of charts\n"
    "            METRICS.jsonl  --trace TRACE.json  --out report.html\n"
    "  sample    generate text from a checkpoint or a Hugging Face model (blocks read from it\n"
    "            one at a time)  --checkpoint DIR | --model HF_DIR\n"
    "            --prompt TEXT | --prompt-tokens \"1 2 3\"  --tokens N\n"
    "            --temperature T (0: greedy)  --top-k K  --seed S  --print-tokens\n"
    "            --tokenizer byte (default) | tokenizer.json | x.model  (--prompt in, text out)\n"
    "            --special-tokens (match a tokenizer.json's added tokens in the prompt)\n"
    "            --no-kv-cache (recompute the window for every token, for comparison)\n"
    "            --resident-bytes SIZE (keep the blocks' weights when they fit in SIZE; default\n"
    "            half the available memory; 0: read every block for every token)\n"
    "  eval      the loss and perplexity of a checkpoint or a Hugging Face model on token data\n"
    "            --checkpoint DIR | --model HF_DIR  --data FILES (as data.val)  --batches N\n"
    "            (default: all of it)  --config FILE  --set key=value ...  --device D\n"
    "            last line on stdout: {\"loss\", \"perplexity\", \"batches\", \"tokens\",\n"
    "            \"trained_tokens\" (the targets a loss mask keeps)}\n"
    "  export    write a checkpoint's weights as a Hugging Face GPT-2 or Llama (+ config.json)\n"
    "            --checkpoint DIR (a step-* directory, or a root: its newest)\n"
    "            --out FILE.safetensors | DIR/ (DIR/model.safetensors)  [--shard-size 2GB]:\n"
    "            weights over the shard size go to BASE-00001-of-0000N.safetensors ... and\n"
    "            BASE.safetensors.index.json beside FILE (Hugging Face's layout)\n"
    "            a LoRA checkpoint: its PEFT adapter in DIR/ (adapter_model.safetensors,\n"
    "            adapter_config.json), or with --merge its merged model as above\n"
    "  gather    the ordinary checkpoint of one written by several ranks (their shards)\n"
    "            --checkpoint DIR (a step-* directory, or a root: its newest)  --out ROOT\n"
    "            (writes ROOT/step-N; export and sample gather by themselves)\n"
    "  plan      predict a run and choose its configuration (docs/design.md §7, docs/planner.md)\n"
    "            --profile HW.json  --model PRESET | --config FILE --set ...  --simulate\n"
    "            --sequences N  --schedule S  --json  --trace FILE  --sweep N,N,...\n"
    "            --max-micro-batch B  --ranks N (data-parallel ranks: tokens/s of all N)\n"
    "  profile   measure this machine and write a hardware profile\n"
    "            --out HW.json  --dir DIR ...  [--config FILE --set ... | --model PRESET]\n"
    "  help      this text (also: strata COMMAND --help)\n"
    "  version   the program's version (also: strata --version)\n";

}  // namespace

const char* usage_text() {
  return kUsage;
}

std::string command_usage(const std::string& command) {
  // The command's lines of the usage: its own line and the indented ones after it.
  std::istringstream in(kUsage);
  std::string out;
  bool in_section = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("  ", 0) == 0 && line.size() > 2 && line[2] != ' ') {
      in_section = line.rfind("  " + command + " ", 0) == 0;
    } else if (line.rfind("  ", 0) != 0) {
      in_section = false;
    }
    if (in_section) out += line + "\n";
  }
  return "usage: strata " + command + " [flags]\n" + out;
}

int fail(const std::string& message, int code) {
  log_error(message);
  return code;
}

int exit_status_for(const Status& s, Stage stage) {
  switch (s.code()) {
    case ErrorCode::invalid_argument:
    case ErrorCode::not_found:
    case ErrorCode::bad_format:
    case ErrorCode::unavailable:
      return 2;
    case ErrorCode::no_space:
    case ErrorCode::out_of_memory:
      return stage == Stage::before_work ? 2 : 1;
    default:  // io_error, internal (ok is not an error: a caller's bug, reported as a failure)
      return 1;
  }
}

int run_command(const std::vector<std::string>& args, const std::vector<FlagSpec>& specs,
                const std::string& command, const std::function<int(const ParsedArgs&)>& body) {
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::fputs(command_usage(command).c_str(), stdout);
      return 0;
    }
  }
  auto parsed = parse_args(args, specs, command);
  if (!parsed.ok()) return fail(parsed.status().message(), 2);
  return body(*parsed);
}

std::string human_count(double n) {
  char buf[32];
  if (n >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else if (n >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else if (n >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fK", n / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

// "lora: rank 8, alpha 16 on 4 of 4 modules per layer: 65.5K trainable parameters (7.21% of
// 908.0K), the rest frozen" (PEFT's print_trainable_parameters, in one line).
std::string describe_lora(const ParamLayout& layout) {
  int on = 0;
  for (bool b : layout.lora_on) on += b ? 1 : 0;
  const double pct = 100.0 * static_cast<double>(layout.trainable_count) /
                     static_cast<double>(std::max<int64_t>(layout.parameter_count, 1));
  char share[64];
  std::snprintf(share, sizeof share, ", alpha %g on ", static_cast<double>(layout.lora.alpha));
  std::string text = "lora: rank " + std::to_string(layout.lora.rank) + share;
  std::snprintf(share, sizeof share, "%.2f%%", pct);
  return text + std::to_string(on) + " of " +
         std::to_string(lora_modules(layout.config.arch).size()) +
         " modules per layer: " + human_count(static_cast<double>(layout.trainable_count)) +
         " trainable parameters (" + share + " of " +
         human_count(static_cast<double>(layout.parameter_count)) + "), the rest frozen";
}

}  // namespace strata::cli
