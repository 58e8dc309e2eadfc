// The striped extent store: a fixed set of named extents (one per slab of state, docs/design.md §2)
// laid out once, at creation, over one preallocated file per storage directory, and moved by
// asynchronous reads and writes through an IoEngine. docs/design.md §3-§4.
//
// Contract:
//   - OWNERSHIP. The store owns its files; the engine is borrowed and must outlive the store. A
//     transfer's buffer must stay valid (and, for writes, unchanged) until its batch is waited.
//   - THREAD SAFETY. The layout is fixed at creation. write/read/wait may be called from any
//     number of threads on different batches; the checksum table is guarded by a mutex. Two
//     transfers of overlapping ranges in flight at once have no defined order (as on a disk).
//   - BATCHES. write/read return an IoBatch (the engine tickets of the pieces). Every batch must
//     be waited once with TensorStore::wait, before the store is destroyed; a batch destroyed
//     while pending is waited then (its error logged), so no transfer outlives its batch.
//   - Sizes and offsets are uint64_t bytes.
//
// Note [Store layout]
// Extents are placed in the order given, each at the next stripe_unit-aligned logical offset, so
// an extent never shares a stripe with another. The logical address space is striped RAID-0 over
// the directories: logical stripe k (bytes [k*su, (k+1)*su)) lives in directory k % ndirs at file
// offset (k / ndirs) * su. Each directory's file is preallocated (fallocate) to exactly the
// stripes it holds, so a full disk is found at creation, not in the middle of a run.

// Note [Direct ranges]
// With options.direct every transfer's offset (within the extent), length and buffer address must
// be multiples of kDirectIoAlignment. An extent of b bytes may then be transferred up to
// round_up(b, 4096) (ExtentInfo::io_bytes): the tail past b is padding inside the extent's own
// stripe, so a 4095-byte tensor moves as one 4096-byte block. Without direct, io_bytes == bytes.

// Note [Extent checksums]
// With options.checksums each extent is cut into chunks of stripe_unit bytes (the last one ends at
// the extent's `bytes`, padding excluded) and the store keeps one CRC32C per chunk in memory.
// Writes must cover whole chunks (start at a chunk boundary, end at one or at the extent's end);
// the CRCs are computed from the buffer at submission and take effect when the write's wait()
// succeeds (a failed write forgets the chunks it touched). A read verifies, after its data has
// landed, every chunk it covers whole that has a CRC; chunks never written, or covered only in
// part, are not checked. save_checksums/load_checksums persist the table for checkpoints.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/scratch_files.h"
#include "core/status.h"
#include "io/io_engine.h"

namespace strata {

struct StoreOptions {
  std::vector<std::string> dirs;           // one per SSD; must exist
  uint64_t stripe_unit = 1ull << 20;       // a multiple of 4096
  bool direct = true;                      // O_DIRECT files (Note [Direct ranges])
  bool checksums = false;                  // Note [Extent checksums]
  std::string file_name = "strata.store";  // the file created in each directory
  // Names tried in turn when another live store holds the file: file_name, then "strata.1.store"
  // and so on (Note [One run per store file] in tensor_store.cpp). 1: refuse instead.
  int32_t instances = 1;
};

struct ExtentSpec {
  std::string name;  // unique, non-empty
  uint64_t bytes = 0;
};

struct ExtentInfo {
  size_t index = 0;
  std::string name;
  uint64_t offset = 0;    // logical offset, a multiple of stripe_unit
  uint64_t bytes = 0;     // as specified
  uint64_t io_bytes = 0;  // how far a transfer may reach: Note [Direct ranges]
};

class TensorStore;

// The engine requests of one write or read. Move-only; see the BATCHES contract.
class IoBatch {
 public:
  IoBatch() = default;
  ~IoBatch();
  IoBatch(IoBatch&& o) noexcept { *this = std::move(o); }
  IoBatch& operator=(IoBatch&& o) noexcept;
  IoBatch(const IoBatch&) = delete;
  IoBatch& operator=(const IoBatch&) = delete;

  bool pending() const { return store_ != nullptr; }
  size_t requests() const { return tickets_.size(); }  // engine requests it was split into

 private:
  friend class TensorStore;
  TensorStore* store_ = nullptr;  // set while pending
  IoOp op_ = IoOp::read;
  size_t extent_ = 0;
  uint64_t offset_ = 0;  // in the extent
  uint64_t length_ = 0;
  uint8_t* buffer_ = nullptr;
  std::vector<Ticket> tickets_;
  uint64_t first_chunk_ = 0;    // checksums: chunk index of offset_
  std::vector<uint32_t> crcs_;  // checksummed writes: one per chunk written
};

class TensorStore {
 public:
  // Validates options and extents (invalid_argument naming the field or extent), opens or creates
  // `file_name` in every directory (not_found for a missing directory; unavailable when the file
  // system refuses O_DIRECT) and preallocates it (no_space naming the directory with the bytes
  // needed and available). Files this call created are removed again if it fails. Each file is
  // locked for this store's lifetime: when another live store holds the name, the next of
  // `instances` names is tried; none free is invalid_argument naming the file (Note [One run per
  // store file] in tensor_store.cpp).
  static Result<std::unique_ptr<TensorStore>> create(IoEngine& engine, const StoreOptions& options,
                                                     const std::vector<ExtentSpec>& extents);
  ~TensorStore();
  TensorStore(const TensorStore&) = delete;
  TensorStore& operator=(const TensorStore&) = delete;

  // Submits the range [offset, offset + length) of an extent, split at stripe boundaries into
  // engine requests. invalid_argument for an unknown extent, a range past io_bytes (naming the
  // extent), misalignment under direct (naming the field), a partial chunk under checksums.
  // A zero length gives a batch with no requests.
  Result<IoBatch> write(size_t extent, uint64_t offset, const void* buffer, uint64_t length);
  Result<IoBatch> write(const std::string& extent, uint64_t offset, const void* buffer,
                        uint64_t length);
  Result<IoBatch> read(size_t extent, uint64_t offset, void* buffer, uint64_t length);
  Result<IoBatch> read(const std::string& extent, uint64_t offset, void* buffer, uint64_t length);
  // Waits for every request of the batch; the first error (engine errors carry the extent's name),
  // or bad_format for a checksum mismatch. The batch is no longer pending afterwards.
  Status wait(IoBatch& batch);

  // Persist / restore the checksum table (Note [Extent checksums]). The file is binary, ends
  // with its own CRC32C, and is replaced atomically (Note [Writing an output file]). load
  // refuses (bad_format naming the field) a file made for another layout.
  Status save_checksums(const std::string& path) const;
  Status load_checksums(const std::string& path);

  // ---- layout ------------------------------------------------------------------------------
  size_t extent_count() const { return extents_.size(); }
  const ExtentInfo& extent(size_t index) const;
  Result<ExtentInfo> extent(const std::string& name) const;
  size_t dir_count() const { return files_.size(); }
  uint64_t dir_bytes(size_t dir) const;  // size of that directory's file
  const IoFile& file(size_t dir) const;
  uint64_t logical_bytes() const { return logical_bytes_; }
  struct Location {
    size_t dir = 0;
    uint64_t file_offset = 0;
  };
  Location locate(uint64_t logical_offset) const;  // Note [Store layout]
  const StoreOptions& options() const { return options_; }
  // The file name this store took in every directory (options().file_name or a later instance).
  const std::string& file_name() const { return file_name_; }

 private:
  struct Chunk {
    uint32_t crc = 0;
    bool valid = false;  // a CRC is known for the chunk
  };

  TensorStore(IoEngine& engine, const StoreOptions& options) : engine_(engine), options_(options) {}
  Result<size_t> find(const std::string& name) const;
  // Opens `name` in every directory, locks and sizes it (`stripes` stripes over all). *busy: a
  // file is held by another live store; nothing is then kept and files this call made are removed.
  Status open_files(const std::string& name, uint64_t stripes, bool* busy);
  Status check_range(const ExtentInfo& e, uint64_t offset, const void* buffer, uint64_t length,
                     IoOp op) const;
  Result<IoBatch> submit(IoOp op, size_t extent, uint64_t offset, uint8_t* buffer, uint64_t length);
  uint64_t chunk_end(const ExtentInfo& e, uint64_t chunk) const;  // in-extent end of a chunk
  Status verify(const IoBatch& batch) const;
  void settle_checksums(const IoBatch& batch, bool ok);

  IoEngine& engine_;
  const StoreOptions options_;
  std::vector<ExtentInfo> extents_;
  std::unordered_map<std::string, size_t> by_name_;
  std::vector<std::unique_ptr<IoFile>> files_;  // one per dir
  // The files, for a signal or crash to remove (Note [Scratch files]): registered from the moment
  // this store holds them, so a stop while the store is being sized and filled leaves nothing.
  std::vector<ScratchFile> scratch_;
  std::vector<uint64_t> file_bytes_;  // one per dir
  uint64_t logical_bytes_ = 0;
  std::string file_name_;

  mutable std::mutex crc_mu_;
  std::vector<std::vector<Chunk>> chunks_;  // guarded by crc_mu_; [extent][chunk] (checksums on)
};

}  // namespace strata
