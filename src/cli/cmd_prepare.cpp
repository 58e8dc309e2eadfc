#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/log.h"
#include "data/byte_tokenizer.h"

namespace strata::cli {

int fail(const std::string& message, int code) {
  std::fprintf(stderr, "strata: error: %s\n", message.c_str());
  return code;
}

int cmd_prepare(const std::vector<std::string>& args) {
  auto parsed = parse_args(args, {{"in", true, false}, {"out", true, false}}, "prepare");
  if (!parsed.ok()) return fail(parsed.status().message(), 2);
  if (!parsed->has("in") || !parsed->has("out")) {
    return fail("strata prepare: --in TEXT and --out FILE.bin are both required", 2);
  }
  Status s = prepare_text_file(parsed->get("in"), parsed->get("out"));
  if (!s.ok()) return fail(s.message(), 2);
  log_info("wrote byte-level tokens of " + parsed->get("in") + " to " + parsed->get("out"));
  return 0;
}

}  // namespace strata::cli
