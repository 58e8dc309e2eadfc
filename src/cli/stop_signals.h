// Stopping training on a signal without losing work or leaving the store behind.
//
// Note [Stopping on a signal]
// SIGINT and SIGTERM ask `strata train` to stop. The first one stops at the next step boundary:
// the training loop polls stop_signal(), applies pending steps, writes a checkpoint when
// checkpointing is configured, prints where to resume from, and returns 128 + the signal (130,
// 143); the trainer's destructor removes the store on the way out, as on every other return.
// A second one stops at once: the handler unlinks the files registered with
// set_scratch_files (the run's store) and _exits with 128 + the signal. A crash (SIGSEGV,
// SIGBUS, SIGFPE, SIGILL) and an abort (SIGABRT: an uncaught exception, a failed CHECK) unlink
// them too, then take the signal's default action, so the exit status and any core dump stay
// what they would have been. unlink and _exit are async-signal-safe; the names are copied into
// static storage beforehand, so the handler touches nothing else. SIGKILL cannot be caught: the
// next run in the same directory takes over the unlocked leftover (Note [One run per store
// file] in io/tensor_store.cpp).
#pragma once

#include <string>
#include <vector>

namespace strata::cli {

// Installs the handlers (SA_RESTART, so interrupted system calls resume). Idempotent.
void install_stop_signals();
// 0, or the first SIGINT/SIGTERM received since install_stop_signals.
int stop_signal();
// The files a crash or a second signal must remove (the run's store); replaces the previous
// set. Names beyond the static capacity (16 paths of 4 KiB) are refused: false.
bool set_scratch_files(const std::vector<std::string>& paths);
// "SIGINT", "SIGTERM", ... for messages.
const char* signal_name(int sig);

}  // namespace strata::cli
