// The files a process must remove however it ends: the run's store, the temporary file of an
// output being written, a checkpoint's temporary directory, a gather's scratch directory. A
// signal handler removes them (cli/stop_signals.h).
//
// Note [Scratch files]
// A fixed table of 64 paths of up to 4 KiB in static storage, so a signal handler can read it
// without allocating or locking. Each slot carries a sequence number, odd while it is being
// filled or cleared: unlink_scratch_files copies a path, checks the number did not move while it
// copied, and only then unlinks, so it never removes half of one name and half of another.
// Registering a name only records it: removing the file stays its owner's job on every normal
// path (a destructor, a failed write). The table is for the exits that skip those paths: a
// signal that ends the process, a crash, an abort. A directory is removed with what it holds,
// three levels deep (getdents64 and unlinkat, no allocation).
#pragma once

#include <string>

namespace strata {

// One registered path; unregistered (not unlinked) when destroyed or released. A name that does
// not fit (too long, table full) is not registered: registered() says so.
class ScratchFile {
 public:
  ScratchFile() = default;
  explicit ScratchFile(const std::string& path);
  ScratchFile(ScratchFile&& other) noexcept;
  ScratchFile& operator=(ScratchFile&& other) noexcept;
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;
  ~ScratchFile() { release(); }

  bool registered() const { return slot_ >= 0; }
  void release();

 private:
  int slot_ = -1;
};

// Unlinks every registered file. Async-signal-safe: only loads, memcpy and unlink.
void unlink_scratch_files();

}  // namespace strata
