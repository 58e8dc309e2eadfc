// Note [Scratch files] in scratch_files.h.
#include "core/scratch_files.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

namespace strata {

namespace {

constexpr int kSlots = 64;
constexpr size_t kMaxPath = 4096;

enum SlotState : int { kFree = 0, kClaimed = 1, kLive = 2 };

struct Slot {
  std::atomic<int> state{kFree};
  std::atomic<uint32_t> seq{0};  // odd while the name is being written or cleared
  char path[kMaxPath];
};

Slot g_slots[kSlots];

static_assert(std::atomic<int>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "the signal handler reads these");

// getdents64's record (the kernel's struct linux_dirent64; glibc has no declaration of it).
struct DirEntry64 {
  uint64_t ino;
  int64_t off;
  unsigned short reclen;
  unsigned char type;
  char name[1];
};

// Removes `name` under dirfd: a file, or a directory with what it holds, `depth` levels deep.
// Async-signal-safe: syscalls and a buffer on the stack. A directory's listing is read again
// after each pass, since removing entries while reading it may skip some.
void remove_path(int dirfd, const char* name, int depth) {
  if (::unlinkat(dirfd, name, 0) == 0 || errno != EISDIR) return;
  const int fd =
      depth > 0 ? ::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
  for (int pass = 0; fd >= 0 && pass < 4; ++pass) {
    alignas(8) char buf[2048];
    bool removed = false;
    ::lseek(fd, 0, SEEK_SET);
    for (long n; (n = ::syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0;) {
      for (long at = 0; at < n;) {
        const auto* e = reinterpret_cast<const DirEntry64*>(buf + at);
        at += e->reclen;
        if (std::strcmp(e->name, ".") == 0 || std::strcmp(e->name, "..") == 0) continue;
        remove_path(fd, e->name, depth - 1);
        removed = true;
      }
    }
    if (!removed) break;
  }
  if (fd >= 0) ::close(fd);
  ::unlinkat(dirfd, name, AT_REMOVEDIR);
}

}  // namespace

ScratchFile::ScratchFile(const std::string& path) {
  if (path.empty() || path.size() >= kMaxPath) return;
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (!g_slots[i].state.compare_exchange_strong(expected, kClaimed)) continue;
    Slot& s = g_slots[i];
    s.seq.fetch_add(1);  // odd: being written
    std::memcpy(s.path, path.c_str(), path.size() + 1);
    s.seq.fetch_add(1);
    s.state.store(kLive);
    slot_ = i;
    return;
  }
}

ScratchFile::ScratchFile(ScratchFile&& other) noexcept : slot_(std::exchange(other.slot_, -1)) {}

ScratchFile& ScratchFile::operator=(ScratchFile&& other) noexcept {
  if (this != &other) {
    release();
    slot_ = std::exchange(other.slot_, -1);
  }
  return *this;
}

void ScratchFile::release() {
  if (slot_ < 0) return;
  Slot& s = g_slots[slot_];
  s.state.store(kClaimed);  // the handler skips it from here on
  s.seq.fetch_add(1);
  s.path[0] = '\0';
  s.seq.fetch_add(1);
  s.state.store(kFree);
  slot_ = -1;
}

void unlink_scratch_files() {
  const int saved_errno = errno;  // a handler must leave errno as it found it
  char name[kMaxPath];
  for (Slot& s : g_slots) {
    if (s.state.load() != kLive) continue;
    const uint32_t before = s.seq.load();
    if (before % 2 != 0) continue;
    std::memcpy(name, s.path, kMaxPath);
    name[kMaxPath - 1] = '\0';
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (s.seq.load() != before || s.state.load() != kLive || name[0] == '\0') continue;
    remove_path(AT_FDCWD, name, 3);
  }
  errno = saved_errno;
}

}  // namespace strata
