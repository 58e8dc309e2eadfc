// Note [Checkpoint lineage] in checkpoint_lineage.h.
#include "formats/checkpoint_lineage.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>
#include <utility>

#include "core/file_util.h"
#include "formats/checkpoint.h"

namespace strata {

namespace fs = std::filesystem;

std::string new_run_id() {
  std::random_device rd;
  const uint64_t id = (uint64_t{rd()} << 32) ^ uint64_t { rd() };
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(id));
  return buf;
}

bool process_is_gone(long pid) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  // It exists, but a killed process that is exiting (its files close last) or that nobody
  // reaped yet (a zombie) starts nothing more. /proc/<pid>/stat: "pid (comm) S ppid pgrp
  // session tty tpgid flags ..."; comm may hold spaces, so fields count from the last ')'.
  auto read = read_whole_file("/proc/" + std::to_string(pid) + "/stat", "process status");
  if (!read.ok()) return false;
  const std::string& stat = *read;
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  if (state == 'Z' || state == 'X') return true;
  std::istringstream fields(stat.substr(paren + 2));
  std::string skip;
  unsigned long flags = 0;
  for (int i = 0; i < 6; ++i) fields >> skip;  // state ppid pgrp session tty_nr tpgid
  constexpr unsigned long kExiting = 0x4;      // PF_EXITING
  return (fields >> flags) && (flags & kExiting) != 0;
}

namespace {

// The pid a lock file names (0 when unreadable).
long lock_holder(int fd) {
  char text[32] = {0};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  return n > 0 ? std::strtol(text, nullptr, 10) : 0;
}

}  // namespace

Result<CheckpointDirLock> CheckpointDirLock::acquire(const std::string& root) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return io_error("cannot create checkpoint directory " + root + ": " + ec.message());
  const std::string path = root + "/.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot open " + path + ": " + std::strerror(errno));
  // A holder that was killed may still be tearing down (its files close last): give it up to
  // 10 s once it is exiting or gone; a live holder is refused at once.
  for (int waited_ms = 0; ::flock(fd, LOCK_EX | LOCK_NB) != 0; waited_ms += 50) {
    const int err = errno;
    const long holder = lock_holder(fd);
    if (err == EWOULDBLOCK && holder > 0 && waited_ms < 10000 && process_is_gone(holder)) {
      ::usleep(50 * 1000);
      continue;
    }
    ::close(fd);
    if (err != EWOULDBLOCK) return io_error("cannot lock " + path + ": " + std::strerror(err));
    return invalid_argument("checkpoint directory " + root + " is in use by another run (pid " +
                            (holder > 0 ? std::to_string(holder) : std::string("?")) +
                            "); choose another --checkpoint-dir");
  }
  const std::string me = std::to_string(::getpid()) + "\n";
  // The pid is a hint for the message above; the lock is what excludes.
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    const int err = errno;
    ::close(fd);
    return io_error("cannot write " + path + ": " + std::strerror(err));
  }
  return CheckpointDirLock(fd);
}

CheckpointDirLock::CheckpointDirLock(CheckpointDirLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)) {}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

namespace {

// The run id a step directory's trainer_state.json names ("" when none or unreadable).
std::string run_id_of(const std::string& dir) {
  auto meta = read_trainer_state(dir);
  return meta.ok() ? meta->run_id : "";
}

}  // namespace

Result<std::vector<std::string>> claim_checkpoint_root(const std::string& root,
                                                       const std::vector<std::string>& lineage,
                                                       int64_t resumed_step) {
  std::vector<std::string> moved;
  const auto dirs = checkpoint_step_dirs(root);
  if (dirs.empty()) return moved;
  if (resumed_step < 0) {
    std::string steps;
    for (const auto& [step, dir] : dirs)
      steps += (steps.empty() ? "" : ", ") + std::to_string(step);
    return invalid_argument(
        "checkpoint directory " + root + " already holds checkpoints of another run (steps " +
        steps + "); continue it with --resume " + root + ", or choose another --checkpoint-dir");
  }
  for (const auto& [step, dir] : dirs) {
    const std::string id = run_id_of(dir);
    const bool ours = std::find(lineage.begin(), lineage.end(), id) != lineage.end();
    if (step <= resumed_step && (id.empty() || ours)) continue;
    const fs::path aside = fs::path(root) / ("superseded-" + (id.empty() ? "unknown" : id));
    const fs::path to = aside / fs::path(dir).filename();
    std::error_code ec;
    fs::create_directories(aside, ec);
    if (!ec && fs::exists(to)) ec = std::make_error_code(std::errc::file_exists);
    if (!ec) fs::rename(dir, to, ec);
    if (ec)
      return io_error("cannot move " + dir + " aside to " + to.string() + ": " + ec.message());
    moved.push_back(to.string());
  }
  return moved;
}

bool is_stale_save_dir(const std::string& name) {
  if (name.rfind(".tmp-step-", 0) != 0) return false;
  const size_t dash = name.rfind('-');
  char* end = nullptr;
  const long pid = std::strtol(name.c_str() + dash + 1, &end, 10);
  if (end == nullptr || *end != '\0' || pid <= 0) return true;  // not ours to keep
  if (pid == ::getpid()) return true;
  return process_is_gone(pid);
}

}  // namespace strata
