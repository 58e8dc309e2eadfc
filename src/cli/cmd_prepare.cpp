// `strata prepare`: text -> llm.c token file, through the byte tokenizer (the default) or
// --tokenizer (a tokenizer.json, a SentencePiece .model, or a directory holding one); JSONL
// examples -> a token file and its loss mask (Note [Instruction data] in data/instruct.h).
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/format.h"
#include "core/json_util.h"
#include "core/log.h"
#include "core/output_file.h"
#include "data/prepare.h"
#include "data/token_file.h"
#include "data/tokenizer.h"

namespace strata::cli {

namespace {

const std::vector<FlagSpec> kPrepareFlags = {
    {"in", true, false},        {"out", true, false},
    {"tokenizer", true, false}, {"special-tokens", false, false},
    {"format", true, false},    {"chat-template", true, false}};

// tokenizer_config.json beside --tokenizer (in the directory, or beside the file), or null.
nlohmann::json tokenizer_config_of(const std::string& tokenizer) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (tokenizer == "byte") return nullptr;
  const fs::path dir =
      fs::is_directory(tokenizer, ec) ? fs::path(tokenizer) : fs::path(tokenizer).parent_path();
  const fs::path path = dir / "tokenizer_config.json";
  if (!fs::exists(path, ec)) return nullptr;
  auto j = read_json_file(path.string());
  if (!j.ok() || !j->is_object()) {
    log_warn(path.string() + " is not a JSON object; its special tokens are not used");
    return nullptr;
  }
  return *j;
}

// A special token of tokenizer_config.json: a string, or an AddedToken object's "content".
std::string special_token(const nlohmann::json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return "";
  const nlohmann::json& v = config.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v.at("content").is_string())
    return v.at("content").get<std::string>();
  return "";
}

// --in FILE.jsonl (or --format jsonl): examples, a token file and its loss mask.
int prepare_jsonl_main(const ParsedArgs& a, Tokenizer& plain) {
  ChatTemplate chat = ChatTemplate::none;
  if (a.has("chat-template")) {
    auto t = parse_chat_template(a.get("chat-template"));
    if (!t.ok()) return fail(t.status().message(), 2);
    chat = *t;
  }
  const nlohmann::json config = tokenizer_config_of(a.get("tokenizer", "byte"));
  const ExampleTokens special{special_token(config, "bos_token"),
                              special_token(config, "eos_token")};
  if (chat == ChatTemplate::none && config.is_object() && config.contains("chat_template")) {
    log_warn(
        "prepare: tokenizer_config.json's chat_template (Jinja) is not run yet; chat "
        "examples need --chat-template chatml or llama3");
  }
  TokenizerOptions marker_options;
  marker_options.special_tokens = true;  // a template's markers are the added tokens
  auto markers = load_tokenizer(a.get("tokenizer", "byte"), marker_options);
  if (!markers.ok()) return fail(markers.status().message(), 2);
  auto stats = prepare_jsonl(plain, **markers, chat, special, a.get("in"), a.get("out"));
  if (!stats.ok())
    return fail(stats.status().message(), exit_status_for(stats.status(), Stage::running));
  char line[256];
  std::snprintf(line, sizeof line,
                "%lld examples, %lld tokens (uint%d), %lld of them trained (%.1f%%), in %.2f s",
                static_cast<long long>(stats->examples), static_cast<long long>(stats->tokens),
                stats->token_bytes * 8, static_cast<long long>(stats->counted),
                100.0 * static_cast<double>(stats->counted) / static_cast<double>(stats->tokens),
                stats->seconds);
  log_info(
      "prepare: " + plain.name() + ": " + a.get("in") + " -> " + a.get("out") + " and " +
      mask_path_for(a.get("out")) + ": " + line +
      (special.eos.empty() ? "; no eos_token in a tokenizer_config.json: examples end bare" : ""));
  return 0;
}

int prepare_main(const ParsedArgs& a) {
  if (!a.has("in") || !a.has("out")) {
    return fail("strata prepare: --in TEXT and --out FILE.bin are both required", 2);
  }
  // Note [Writing an output file]: refused before the tokenizer and the text are read.
  if (Status usable = check_output_path(a.get("out"), "data file"); !usable.ok()) {
    return fail(usable.message(), exit_status_for(usable, Stage::before_work));
  }
  TokenizerOptions options;
  options.special_tokens = a.has("special-tokens");
  auto tok = load_tokenizer(a.get("tokenizer", "byte"), options);
  if (!tok.ok()) return fail(tok.status().message(), 2);
  const std::string format = a.get("format", a.get("in").ends_with(".jsonl") ? "jsonl" : "text");
  if (format != "text" && format != "jsonl") {
    return fail("--format '" + excerpt(format) + "' is not text or jsonl", 2);
  }
  if (format == "jsonl") return prepare_jsonl_main(a, **tok);
  if (a.has("chat-template"))
    return fail("--chat-template needs JSONL examples (--format jsonl)", 2);
  if (const std::string why = (*tok)->cut_refusal(); !why.empty()) {
    log_info("prepare: the text is encoded in one piece, in memory: " + why);
  }
  auto stats = prepare_token_file(**tok, a.get("in"), a.get("out"));
  if (!stats.ok())
    return fail(stats.status().message(), exit_status_for(stats.status(), Stage::running));
  char line[256];
  const double mb = static_cast<double>(stats->text_bytes) / 1e6;
  std::snprintf(line, sizeof line,
                "%lld tokens (uint%d) from %.1f MB in %.2f s (%.1f MB/s, %lld pieces, the largest "
                "%.0f KB)",
                static_cast<long long>(stats->tokens), stats->token_bytes * 8, mb, stats->seconds,
                stats->seconds > 0 ? mb / stats->seconds : 0.0,
                static_cast<long long>(stats->pieces),
                static_cast<double>(stats->largest_piece) / 1e3);
  log_info("prepare: " + (*tok)->name() + ": " + a.get("in") + " -> " + a.get("out") + ": " + line);
  return 0;
}

}  // namespace

int cmd_prepare(const std::vector<std::string>& args) {
  return run_command(args, kPrepareFlags, "prepare", prepare_main);
}

}  // namespace strata::cli
