// A file written front to back through an IoEngine (so io.faults and the rate limiter apply),
// with its CRC32C and size kept as it grows: the checkpoint's files.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "io/io_engine.h"

namespace strata {

// fsync of a file or directory by path.
Status fsync_path(const std::string& path);

class SequentialFile {
 public:
  // Creates (or truncates) `path`.
  static Result<SequentialFile> create(IoEngine& engine, const std::string& path);
  SequentialFile(SequentialFile&&) noexcept = default;
  SequentialFile& operator=(SequentialFile&&) noexcept = default;

  // The next `bytes`; the engine retries short transfers, errors name the file.
  Status append(const void* data, int64_t bytes);
  // Later appends write from `offset` on, and crc() restarts from there: a file written in
  // segments, not in file order (Note [Asynchronous checkpoints] in model/state_snapshot.h).
  void seek(int64_t offset) {
    position_ = offset;
    crc_ = 0;
  }
  // fsync and close.
  Status finish();
  uint32_t crc() const { return crc_; }   // of the bytes appended since creation or seek
  int64_t size() const { return size_; }  // the furthest byte written
  int64_t position() const { return position_; }
  const std::string& path() const;

 private:
  SequentialFile(IoEngine& engine, std::unique_ptr<IoFile> f)
      : engine_(&engine), file_(std::move(f)) {}
  IoEngine* engine_;
  std::unique_ptr<IoFile> file_;
  uint32_t crc_ = 0;
  int64_t position_ = 0;
  int64_t size_ = 0;
};

}  // namespace strata
