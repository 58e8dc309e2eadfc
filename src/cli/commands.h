// The `strata` subcommands. Each returns the process exit status: 0 only on full success;
// 2 for bad input (config, flags, files), 1 for failures while running.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cli/args.h"
#include "core/status.h"
#include "model/layout.h"

namespace strata::cli {

int cmd_train(const std::vector<std::string>& args);
int cmd_prepare(const std::vector<std::string>& args);
int cmd_bench_io(const std::vector<std::string>& args);
int cmd_export(const std::vector<std::string>& args);
int cmd_gather(const std::vector<std::string>& args);
int cmd_plan(const std::vector<std::string>& args);
int cmd_profile(const std::vector<std::string>& args);
int cmd_sample(const std::vector<std::string>& args);
int cmd_eval(const std::vector<std::string>& args);
int cmd_report(const std::vector<std::string>& args);
// The run report of a metrics file (and a trace, when `trace_path` is not empty) to `out`.
Status write_run_report(const std::string& metrics_path, const std::string& trace_path,
                        const std::string& out, const std::string& title);

// The usage of every command (`strata help`), and of one (`strata COMMAND --help`).
const char* usage_text();
std::string command_usage(const std::string& command);

// Prints "strata: error: <message>" as one line and returns `code`.
int fail(const std::string& message, int code);

// Note [Exit status]: one rule for every command. 0: done as asked. 2: bad input, the user's
// to fix before anything runs: a field, flag or file that is wrong, missing or malformed, a
// device that cannot run here, and, found before any work (the store's preallocation, an
// output's creation), a full disk or a budget the plan does not fit. 1: a failure while
// running: an I/O error, a full disk or an exhausted budget met under training, a checkpoint
// or an output being written, a bug. 128 + N: stopped by signal N (Note [Stopping on a
// signal]). README's "Exit status" and design.md say the same; cli_bad_input.sh,
// cli_host_budget.sh, cli_checkpoint_full_disk.sh, cli_data_shrinks.sh, stop_signals.sh test it.
enum class Stage { before_work, running };
int exit_status_for(const Status& s, Stage stage);

// `strata <command>`: `body` on its flags as parse_args reads them with `specs`, or a flag it
// refuses as one line and exit status 2; --help or -h anywhere prints the command's usage and
// exits 0. Returns the exit status.
int run_command(const std::vector<std::string>& args, const std::vector<FlagSpec>& specs,
                const std::string& command, const std::function<int(const ParsedArgs&)>& body);

// "1.23M": a count for people.
std::string human_count(double n);
// "lora: rank 8, alpha 16 on 4 of 4 modules per layer: 65.5K trainable parameters (7.21% of
// 908.0K), the rest frozen" (PEFT's print_trainable_parameters, in one line).
std::string describe_lora(const ParamLayout& layout);

}  // namespace strata::cli
