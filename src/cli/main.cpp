// strata: train GPT-style models larger than device and host memory.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/stop_signals.h"

int main(int argc, char** argv) {
  // Before anything is created (Note [Stopping on a signal]).
  strata::cli::install_stop_signals();
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::fputs(strata::cli::usage_text(), args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version" || args[0] == "version") {
    std::printf("strata %s\n", STRATA_VERSION);
    return 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "train") return strata::cli::cmd_train(args);
  if (command == "prepare") return strata::cli::cmd_prepare(args);
  if (command == "bench-io") return strata::cli::cmd_bench_io(args);
  if (command == "export") return strata::cli::cmd_export(args);
  if (command == "gather") return strata::cli::cmd_gather(args);
  if (command == "sample") return strata::cli::cmd_sample(args);
  if (command == "eval") return strata::cli::cmd_eval(args);
  if (command == "report") return strata::cli::cmd_report(args);
  if (command == "plan") return strata::cli::cmd_plan(args);
  if (command == "profile") return strata::cli::cmd_profile(args);
  return strata::cli::fail("unknown command '" + command + "' (try: strata help)", 2);
}
