// Note [Checkpoint lineage] in checkpoint_lineage.h.
#include "io/checkpoint_lineage.h"

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
#include <utility>

#include "core/file_util.h"
#include "io/checkpoint.h"

namespace strata {

namespace fs = std::filesystem;

std::string new_run_id() {
  std::random_device rd;
  const uint64_t id = (uint64_t{rd()} << 32) ^ uint64_t { rd() };
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(id));
  return buf;
}

Result<CheckpointDirLock> CheckpointDirLock::acquire(const std::string& root) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return io_error("cannot create checkpoint directory " + root + ": " + ec.message());
  const std::string path = root + "/.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot open " + path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[32] = {0};
    const ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK) return io_error("cannot lock " + path + ": " + std::strerror(err));
    std::string pid = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "?";
    pid.erase(std::remove(pid.begin(), pid.end(), '\n'), pid.end());
    return invalid_argument("checkpoint directory " + root + " is in use by another run (pid " +
                            pid + "); choose another --checkpoint-dir");
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
  if (::kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  // It exists, but a killed process that nobody reaped yet (a zombie) writes nothing more.
  auto read = read_whole_file("/proc/" + std::to_string(pid) + "/stat", "process status");
  if (!read.ok()) return false;
  const std::string& stat = *read;
  const size_t paren = stat.rfind(')');  // "pid (comm) S ...": comm may hold spaces
  return paren != std::string::npos && paren + 2 < stat.size() &&
         (stat[paren + 2] == 'Z' || stat[paren + 2] == 'X');
}

}  // namespace strata
