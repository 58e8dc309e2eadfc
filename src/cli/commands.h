// The `strata` subcommands. Each returns the process exit status: 0 only on full success;
// 2 for bad input (config, flags, files), 1 for failures while running.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cli/args.h"
#include "core/status.h"

namespace strata::cli {

int cmd_train(const std::vector<std::string>& args);
int cmd_prepare(const std::vector<std::string>& args);
int cmd_bench_io(const std::vector<std::string>& args);
int cmd_export(const std::vector<std::string>& args);
int cmd_gather(const std::vector<std::string>& args);
int cmd_plan(const std::vector<std::string>& args);
int cmd_profile(const std::vector<std::string>& args);
int cmd_sample(const std::vector<std::string>& args);
int cmd_report(const std::vector<std::string>& args);
// The run report of a metrics file (and a trace, when `trace_path` is not empty) to `out`.
Status write_run_report(const std::string& metrics_path, const std::string& trace_path,
                        const std::string& out, const std::string& title);

// The usage of every command (`strata help`), and of one (`strata COMMAND --help`).
const char* usage_text();
std::string command_usage(const std::string& command);

// Prints "strata: error: <message>" as one line and returns `code`.
int fail(const std::string& message, int code);

// `strata <command>`: `body` on its flags as parse_args reads them with `specs`, or a flag it
// refuses as one line and exit status 2; --help or -h anywhere prints the command's usage and
// exits 0. Returns the exit status.
int run_command(const std::vector<std::string>& args, const std::vector<FlagSpec>& specs,
                const std::string& command, const std::function<int(const ParsedArgs&)>& body);

}  // namespace strata::cli
