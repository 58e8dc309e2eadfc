// Note [Scratch files] in scratch_files.h.
#include "core/scratch_files.h"

#include <unistd.h>

#include <atomic>
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
  char name[kMaxPath];
  for (Slot& s : g_slots) {
    if (s.state.load() != kLive) continue;
    const uint32_t before = s.seq.load();
    if (before % 2 != 0) continue;
    std::memcpy(name, s.path, kMaxPath);
    name[kMaxPath - 1] = '\0';
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (s.seq.load() != before || s.state.load() != kLive || name[0] == '\0') continue;
    ::unlink(name);
  }
}

}  // namespace strata
