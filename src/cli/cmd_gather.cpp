// strata gather: the ordinary (version 2) checkpoint of a sharded one (Note [Sharded
// checkpoints] in formats/checkpoint_shards.h), for tools that read Hugging Face files and for
// comparing runs of different world sizes. Host memory: one piece buffer.
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/gathered_checkpoint.h"
#include "core/format.h"
#include "core/log.h"
#include "formats/checkpoint.h"

namespace strata::cli {

namespace {

const std::vector<FlagSpec> kGatherFlags = {{"checkpoint", true, false}, {"out", true, false}};

int gather_main(const ParsedArgs& a) {
  if (!a.has("checkpoint") || !a.has("out")) {
    return fail("strata gather: --checkpoint DIR and --out ROOT are both required", 2);
  }
  auto dir = resolve_checkpoint(a.get("checkpoint"));
  if (!dir.ok()) return fail(dir.status().message(), 2);
  auto saved = gather_into(*dir, a.get("out"));
  if (!saved.ok()) {
    return fail(saved.status().message(), exit_status_for(saved.status(), Stage::running));
  }
  log_info("gathered checkpoint " + *dir + " into " + saved->dir + " (" +
           format_bytes(saved->bytes) + ")");
  return 0;
}

}  // namespace

int cmd_gather(const std::vector<std::string>& args) {
  return run_command(args, kGatherFlags, "gather", gather_main);
}

}  // namespace strata::cli
