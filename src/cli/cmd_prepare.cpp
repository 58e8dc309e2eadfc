// `strata prepare`: text -> llm.c token file, through the byte tokenizer (the default) or
// --tokenizer (a tokenizer.json, a SentencePiece .model, or a directory holding one).
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/log.h"
#include "core/output_file.h"
#include "data/prepare.h"
#include "data/tokenizer.h"

namespace strata::cli {

namespace {

const std::vector<FlagSpec> kPrepareFlags = {{"in", true, false},
                                             {"out", true, false},
                                             {"tokenizer", true, false},
                                             {"special-tokens", false, false}};

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
