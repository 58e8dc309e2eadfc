// Note [Stopping on a signal] in stop_signals.h.
#include "cli/stop_signals.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace strata::cli {

namespace {

constexpr int kMaxFiles = 16;
constexpr size_t kMaxPath = 4096;

// Read by the handlers: plain static storage, published through the count.
char g_files[kMaxFiles][kMaxPath];
std::atomic<int> g_file_count{0};
std::atomic<int> g_stop{0};
bool g_installed = false;

void unlink_scratch_files() {
  const int n = g_file_count.load();
  for (int i = 0; i < n; ++i) ::unlink(g_files[i]);
}

void on_stop(int sig) {
  int expected = 0;
  if (g_stop.compare_exchange_strong(expected, sig)) return;  // the first: at the step boundary
  unlink_scratch_files();
  ::_exit(128 + sig);
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
  sa.sa_flags = SA_RESTART;
  ::sigaction(sig, &sa, nullptr);
}

}  // namespace

void install_stop_signals() {
  if (g_installed) return;
  g_installed = true;
  install(SIGINT, on_stop);
  install(SIGTERM, on_stop);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) install(sig, on_fatal);
}

int stop_signal() {
  return g_stop.load();
}

bool set_scratch_files(const std::vector<std::string>& paths) {
  g_file_count.store(0);
  if (paths.size() > static_cast<size_t>(kMaxFiles)) return false;
  for (const std::string& p : paths) {
    if (p.size() >= kMaxPath) return false;
  }
  for (size_t i = 0; i < paths.size(); ++i) {
    std::memcpy(g_files[i], paths[i].c_str(), paths[i].size() + 1);
  }
  g_file_count.store(static_cast<int>(paths.size()));
  return true;
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    default:
      return "a signal";
  }
}

}  // namespace strata::cli
