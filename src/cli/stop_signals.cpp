// Note [Stopping on a signal] in stop_signals.h.
#include "cli/stop_signals.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

#include "core/log.h"
#include "core/scratch_files.h"

namespace strata::cli {

namespace {

std::atomic<int> g_stop{0};
std::atomic<bool> g_at_boundaries{false};
bool g_installed = false;

// One line on stderr, from a handler: write(2) only. Its result is of no use here.
void say(const char* a, const char* b) {
  const char* parts[] = {"strata: stopped at once by ", a, b, "\n"};
  for (const char* p : parts) {
    if (::write(STDERR_FILENO, p, std::strlen(p)) < 0) return;
  }
}

void stop_now(int sig, const char* why) {
  unlink_scratch_files();
  say(signal_name(sig), why);
  ::_exit(128 + sig);
}

void on_stop(int sig) {
  if (!g_at_boundaries.load()) stop_now(sig, "");
  int expected = 0;
  if (g_stop.compare_exchange_strong(expected, sig)) return;  // the first: at the step boundary
  if (sig == SIGPIPE) return;  // each write to the closed pipe raises one; the write fails
  stop_now(sig, " (the second signal)");
}

void on_fatal(int sig) {
  unlink_scratch_files();
  std::signal(sig, SIG_DFL);  // async-signal-safe for the calling signal
  ::raise(sig);
}

void install(int sig, void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  // One stop handler at a time: a line written to a closed pipe while stopping on SIGTERM must
  // not turn the exit into SIGPIPE's.
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaddset(&sa.sa_mask, s);
  sa.sa_flags = SA_RESTART;
  ::sigaction(sig, &sa, nullptr);
}

}  // namespace

void install_stop_signals() {
  if (g_installed) return;
  g_installed = true;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) install(sig, on_stop);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) install(sig, on_fatal);
}

void stop_at_step_boundaries() {
  g_at_boundaries.store(true);
}

int stop_signal() {
  const int sig = g_stop.load();
  return sig != 0 ? sig : stderr_closed() ? SIGPIPE : 0;
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    case SIGPIPE:
      return "SIGPIPE";
    default:
      return "a signal";
  }
}

}  // namespace strata::cli
