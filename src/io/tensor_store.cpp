#include "io/tensor_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "core/check.h"
#include "core/log.h"
#include "core/math_util.h"
#include "io/crc32c.h"

namespace strata {

namespace {

std::string quoted(const std::string& s) {
  return "'" + s + "'";
}

// Removes the files create() made if it fails half way, so a refused run leaves no 20 GB file.
struct CreatedFiles {
  std::vector<std::string> paths;
  bool keep = false;
  ~CreatedFiles() {
    if (keep) return;
    for (const auto& p : paths) ::unlink(p.c_str());  // best effort: we are already failing
  }
};

// Note [One run per store file]: a store file belongs to the one store that holds an exclusive
// flock on it, from before it is sized until it is closed. A second store (another run given the
// same io.dirs, or a second store in this process) never resizes, overwrites or removes anything
// of the first one's: it takes the next free name (StoreOptions::instances), or is refused when
// there is none. The lock goes with the file descriptor, so a killed run releases it, and the
// next run that finds the name free takes the file over (a stale file is reused, never leaked
// one per crash). Only the holder removes its files, and it does so while still holding them.
// A killed run that had taken a later name (the first was still held by a run that was exiting)
// leaves that file, and with the first name free again no run would take it over: so a store
// that takes a name also removes every other instance file that no live store holds, after
// taking its lock (so it is the holder when it removes it). A store that locks a name checks that
// the path still names the file it locked; when it does not (the file was just removed that
// way), the name counts as busy.
Result<bool> lock_exclusively(const IoFile& f) {
  if (::flock(f.fd, LOCK_EX | LOCK_NB) == 0) return true;
  if (errno == EWOULDBLOCK) return false;
  return io_error("storage file " + f.path + ": flock: " + std::strerror(errno));
}

// Whether `path` still names the file `f` has open (the same inode).
bool names_file(const std::string& path, const IoFile& f) {
  struct stat by_path {
  }, by_fd{};
  return ::stat(path.c_str(), &by_path) == 0 && ::fstat(f.fd, &by_fd) == 0 &&
         by_path.st_dev == by_fd.st_dev && by_path.st_ino == by_fd.st_ino;
}

// Removes `name` in every directory where no live store holds it (Note [One run per store file]).
// Best effort: a file that cannot be opened or locked is left as it is.
void remove_stale_files(const std::vector<std::string>& dirs, const std::string& name) {
  for (const std::string& dir : dirs) {
    const std::string path = dir + "/" + name;
    if (::access(path.c_str(), F_OK) != 0) continue;
    auto file = open_io_file(path, /*create=*/false, /*direct=*/false);
    if (!file.ok()) continue;
    auto locked = lock_exclusively(**file);
    if (locked.ok() && *locked && names_file(path, **file)) {
      ::unlink(path.c_str());
      log_info("removed " + path + ", a store file left by a run that is gone");
    }
    close_io_file(**file);
  }
}

// The k-th name a store may take in a directory (Note [One run per store file]): the configured
// name, then "strata.1.store", "strata.2.store", ... (the number before the extension).
std::string instance_file_name(const std::string& name, int32_t k) {
  if (k == 0) return name;
  size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0) dot = name.size();
  std::string out = name;
  out.insert(dot, "." + std::to_string(k));
  return out;
}

// Every directory exists, is a directory, and is listed once (two entries naming one directory
// would put two stripes of the layout in one file).
Status check_dirs(const std::vector<std::string>& dirs) {
  std::set<std::string> seen;
  for (const std::string& dir : dirs) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) {
      if (errno == ENOENT) return not_found("storage directory " + dir + " does not exist");
      return io_error("storage directory " + dir + ": " + std::strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) {
      return invalid_argument("storage directory " + dir + " is not a directory");
    }
    if (!seen.insert(std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino)).second) {
      return invalid_argument("storage directory " + dir + " is listed twice");
    }
  }
  return Status::ok_status();
}

// fallocate the whole file; no_space names the directory with what it needs and has.
Status preallocate(const IoFile& f, const std::string& dir, uint64_t bytes) {
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) {
    return io_error("storage file " + f.path + ": fstat: " + std::strerror(errno));
  }
  if (bytes > 0 && ::fallocate(f.fd, 0, 0, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    if (err == ENOSPC || err == EDQUOT) {
      // Give back what a partial allocation took, so "available" is what the directory had.
      if (::ftruncate(f.fd, st.st_size) != 0) {
        log_debug("storage file " + f.path + ": ftruncate after ENOSPC: " + std::strerror(errno));
      }
      struct statvfs vfs {};
      std::string avail = "unknown";
      if (::statvfs(dir.c_str(), &vfs) == 0) {
        avail = std::to_string(static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize);
      }
      return Status(ErrorCode::no_space, "storage directory " + dir + " is too small for " +
                                             f.path + ": needs " + std::to_string(bytes) +
                                             " bytes, " + avail + " bytes available");
    }
    if (err != EOPNOTSUPP) {
      return io_error("storage file " + f.path + ": fallocate of " + std::to_string(bytes) +
                      " bytes: " + std::strerror(err));
    }
    // A file system without fallocate: size the file and let the space be found on first write.
    log_debug("storage file " + f.path + ": fallocate not supported, sized with ftruncate");
    if (::ftruncate(f.fd, static_cast<off_t>(bytes)) != 0) {
      return io_error("storage file " + f.path + ": ftruncate: " + std::strerror(errno));
    }
  }
  // A file left from a larger layout keeps its extra bytes otherwise.
  if (static_cast<uint64_t>(st.st_size) > bytes &&
      ::ftruncate(f.fd, static_cast<off_t>(bytes)) != 0) {
    return io_error("storage file " + f.path + ": ftruncate: " + std::strerror(errno));
  }
  return Status();
}

}  // namespace

// ---- IoBatch --------------------------------------------------------------------------------

IoBatch::~IoBatch() {
  if (store_ == nullptr) return;
  Status s = store_->wait(*this);
  if (!s.ok()) log_warn("an I/O batch destroyed before it was waited failed: " + s.message());
}

IoBatch& IoBatch::operator=(IoBatch&& o) noexcept {
  if (this != &o) {
    if (store_ != nullptr) {
      Status s = store_->wait(*this);
      if (!s.ok()) log_warn("an I/O batch overwritten before it was waited failed: " + s.message());
    }
    store_ = std::exchange(o.store_, nullptr);
    op_ = o.op_;
    extent_ = o.extent_;
    offset_ = o.offset_;
    length_ = o.length_;
    buffer_ = o.buffer_;
    tickets_ = std::move(o.tickets_);
    first_chunk_ = o.first_chunk_;
    crcs_ = std::move(o.crcs_);
  }
  return *this;
}

// ---- creation and layout --------------------------------------------------------------------

Result<std::unique_ptr<TensorStore>> TensorStore::create(IoEngine& engine,
                                                         const StoreOptions& options,
                                                         const std::vector<ExtentSpec>& extents) {
  const uint64_t su = options.stripe_unit;
  if (options.dirs.empty()) return invalid_argument("store: no storage directories given");
  if (su == 0 || su % kDirectIoAlignment != 0) {
    return invalid_argument("store: stripe_unit " + std::to_string(su) +
                            " is not a positive multiple of " + std::to_string(kDirectIoAlignment));
  }
  if (options.file_name.empty() || options.file_name.find('/') != std::string::npos) {
    return invalid_argument("store: file_name " + quoted(options.file_name) +
                            " must be a plain file name");
  }
  std::unique_ptr<TensorStore> store(new TensorStore(engine, options));

  uint64_t offset = 0;
  for (const ExtentSpec& spec : extents) {
    if (spec.name.empty()) {
      return invalid_argument("store: extent " + std::to_string(store->extents_.size()) +
                              " has an empty name");
    }
    if (!store->by_name_.emplace(spec.name, store->extents_.size()).second) {
      return invalid_argument("store: extent name " + quoted(spec.name) + " appears twice");
    }
    ExtentInfo e;
    e.index = store->extents_.size();
    e.name = spec.name;
    e.offset = offset;
    e.bytes = spec.bytes;
    e.io_bytes = options.direct ? round_up(spec.bytes, kDirectIoAlignment) : spec.bytes;
    offset += round_up(spec.bytes, su);
    store->extents_.push_back(e);
    if (options.checksums) store->chunks_.emplace_back((spec.bytes + su - 1) / su);
  }
  store->logical_bytes_ = offset;

  STRATA_RETURN_IF_ERROR(check_dirs(options.dirs));
  const int32_t instances = std::max<int32_t>(1, options.instances);
  for (int32_t k = 0; k < instances; k++) {
    const std::string name = instance_file_name(options.file_name, k);
    bool busy = false;
    STRATA_RETURN_IF_ERROR(store->open_files(name, offset / su, &busy));
    if (!busy) {
      for (int32_t j = 0; j < instances; j++) {
        if (j != k) remove_stale_files(options.dirs, instance_file_name(options.file_name, j));
      }
      return store;
    }
  }
  return invalid_argument("storage file " + options.dirs.front() + "/" + options.file_name +
                          (instances > 1
                               ? " and the " + std::to_string(instances - 1) + " names after it are"
                               : std::string(" is")) +
                          " in use by other runs; give each run io.dirs of its own");
}

Status TensorStore::open_files(const std::string& name, uint64_t stripes, bool* busy) {
  const uint64_t ndirs = options_.dirs.size(), su = options_.stripe_unit;
  CreatedFiles created;
  std::vector<ScratchFile> scratch;
  std::vector<std::unique_ptr<IoFile>> files;
  std::vector<uint64_t> sizes;
  for (uint64_t d = 0; d < ndirs; d++) {
    const std::string& dir = options_.dirs[d];
    const std::string path = dir + "/" + name;
    const bool existed = ::access(path.c_str(), F_OK) == 0;
    auto file = open_io_file(path, /*create=*/true, options_.direct);
    if (!file.ok()) {
      if (file.status().code() == ErrorCode::unavailable) {
        return unavailable("storage directory " + dir +
                           " does not support O_DIRECT (e.g. tmpfs); use a directory on an "
                           "SSD file system or turn direct I/O off: " +
                           file.status().message());
      }
      return Status(file.status().code(),
                    "storage directory " + dir + ": " + file.status().message());
    }
    if (!existed) created.paths.push_back(path);
    STRATA_ASSIGN_OR_RETURN(const bool locked, lock_exclusively(**file));
    if (!locked || !names_file(path, **file)) {  // another live store's: leave it alone
      std::erase(created.paths, path);  // whoever made the file now named so, it is not ours
      *busy = true;
      return Status::ok_status();
    }
    scratch.emplace_back(path);  // ours from here: a signal while it is sized removes it
    const uint64_t dir_stripes = stripes > d ? (stripes - d + ndirs - 1) / ndirs : 0;
    const uint64_t bytes = dir_stripes * su;
    STRATA_RETURN_IF_ERROR(preallocate(**file, dir, bytes));
    files.push_back(std::move(file).value());
    sizes.push_back(bytes);
  }
  created.keep = true;
  files_ = std::move(files);
  scratch_ = std::move(scratch);
  file_bytes_ = std::move(sizes);
  file_name_ = name;
  return Status::ok_status();
}

TensorStore::~TensorStore() = default;

const ExtentInfo& TensorStore::extent(size_t index) const {
  STRATA_CHECK(index < extents_.size());
  return extents_[index];
}

Result<size_t> TensorStore::find(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return not_found("store has no extent " + quoted(name));
  return it->second;
}

Result<ExtentInfo> TensorStore::extent(const std::string& name) const {
  STRATA_ASSIGN_OR_RETURN(size_t index, find(name));
  return extents_[index];
}

uint64_t TensorStore::dir_bytes(size_t dir) const {
  STRATA_CHECK(dir < file_bytes_.size());
  return file_bytes_[dir];
}

const IoFile& TensorStore::file(size_t dir) const {
  STRATA_CHECK(dir < files_.size());
  return *files_[dir];
}

TensorStore::Location TensorStore::locate(uint64_t logical_offset) const {
  const uint64_t su = options_.stripe_unit;
  const uint64_t k = logical_offset / su;
  return Location{static_cast<size_t>(k % files_.size()),
                  (k / files_.size()) * su + logical_offset % su};
}

uint64_t TensorStore::chunk_end(const ExtentInfo& e, uint64_t chunk) const {
  return std::min((chunk + 1) * options_.stripe_unit, e.bytes);
}

// ---- transfers --------------------------------------------------------------------------------

Status TensorStore::check_range(const ExtentInfo& e, uint64_t offset, const void* buffer,
                                uint64_t length, IoOp op) const {
  std::string where = std::string(io_op_name(op)) + " of extent " + quoted(e.name);
  if (offset > e.io_bytes || length > e.io_bytes - offset) {
    return invalid_argument(where + ": range [" + std::to_string(offset) + ", " +
                            std::to_string(offset + length) + ") is past the extent's end (" +
                            std::to_string(e.io_bytes) + " bytes)");
  }
  if (length > 0 && buffer == nullptr) return invalid_argument(where + ": buffer is null");
  if (options_.direct) {
    auto misaligned = [](uint64_t x) { return x % kDirectIoAlignment != 0; };
    const char* field = misaligned(offset)                                ? "offset"
                        : misaligned(length)                              ? "length"
                        : misaligned(reinterpret_cast<uintptr_t>(buffer)) ? "buffer address"
                                                                          : nullptr;
    if (field != nullptr) {
      return invalid_argument(where + ": " + field + " is not a multiple of " +
                              std::to_string(kDirectIoAlignment) + " (O_DIRECT store)");
    }
  }
  if (options_.checksums && op == IoOp::write && length > 0) {
    const uint64_t su = options_.stripe_unit;
    uint64_t end = offset + length;
    if (offset % su != 0 || (end % su != 0 && end < e.bytes)) {
      return invalid_argument(where + ": range [" + std::to_string(offset) + ", " +
                              std::to_string(end) + ") does not cover whole " + std::to_string(su) +
                              "-byte chunks (checksums on)");
    }
  }
  return Status();
}

Result<IoBatch> TensorStore::submit(IoOp op, size_t index, uint64_t offset, uint8_t* buffer,
                                    uint64_t length) {
  if (index >= extents_.size()) {
    return invalid_argument("store has no extent number " + std::to_string(index) + " (it has " +
                            std::to_string(extents_.size()) + ")");
  }
  const ExtentInfo& e = extents_[index];
  STRATA_RETURN_IF_ERROR(check_range(e, offset, buffer, length, op));
  const uint64_t su = options_.stripe_unit;

  IoBatch batch;
  batch.op_ = op;
  batch.extent_ = index;
  batch.offset_ = offset;
  batch.length_ = length;
  batch.buffer_ = buffer;
  batch.first_chunk_ = offset / su;
  if (options_.checksums && op == IoOp::write) {
    for (uint64_t c = offset / su; c * su < std::min(offset + length, e.bytes); c++) {
      uint64_t begin = c * su;
      batch.crcs_.push_back(crc32c(buffer + (begin - offset), chunk_end(e, c) - begin));
    }
  }

  // Pieces: the range cut at stripe boundaries, neighbours merged when they continue each other
  // in one file (always so with one directory).
  struct Piece {
    size_t dir;
    uint64_t file_offset, length;
    uint8_t* buffer;
  };
  std::vector<Piece> pieces;
  for (uint64_t done = 0; done < length;) {
    uint64_t logical = e.offset + offset + done;
    uint64_t n = std::min(length - done, su - logical % su);
    Location at = locate(logical);
    if (!pieces.empty() && pieces.back().dir == at.dir &&
        pieces.back().file_offset + pieces.back().length == at.file_offset) {
      pieces.back().length += n;
    } else {
      pieces.push_back(Piece{at.dir, at.file_offset, n, buffer + done});
    }
    done += n;
  }

  batch.store_ = this;  // from here on the batch must be waited, even on a refusal below
  for (const Piece& p : pieces) {
    STRATA_CHECK(p.file_offset + p.length <= file_bytes_[p.dir]);
    IoRequest r{op, files_[p.dir].get(), p.file_offset, p.buffer, p.length};
    Result<Ticket> t = engine_.submit(r);
    if (!t.ok()) {
      // Already checked above, so a refusal here is the engine's own limit: finish what was
      // submitted before reporting it.
      Status waited = wait(batch);
      (void)waited;
      return Status(t.status().code(), "extent " + quoted(e.name) + ": " + t.status().message());
    }
    batch.tickets_.push_back(t.value());
  }
  if (batch.tickets_.empty()) batch.store_ = nullptr;
  return batch;
}

Result<IoBatch> TensorStore::write(size_t extent, uint64_t offset, const void* buffer,
                                   uint64_t length) {
  // The engine only reads a write's buffer; IoRequest has one pointer type for both directions.
  return submit(IoOp::write, extent, offset,
                const_cast<uint8_t*>(static_cast<const uint8_t*>(buffer)), length);
}

Result<IoBatch> TensorStore::write(const std::string& extent, uint64_t offset, const void* buffer,
                                   uint64_t length) {
  STRATA_ASSIGN_OR_RETURN(size_t index, find(extent));
  return write(index, offset, buffer, length);
}

Result<IoBatch> TensorStore::read(size_t extent, uint64_t offset, void* buffer, uint64_t length) {
  return submit(IoOp::read, extent, offset, static_cast<uint8_t*>(buffer), length);
}

Result<IoBatch> TensorStore::read(const std::string& extent, uint64_t offset, void* buffer,
                                  uint64_t length) {
  STRATA_ASSIGN_OR_RETURN(size_t index, find(extent));
  return read(index, offset, buffer, length);
}

Status TensorStore::wait(IoBatch& batch) {
  if (batch.store_ == nullptr) return Status();
  STRATA_CHECK_MSG(batch.store_ == this, "I/O batch waited on another store");
  batch.store_ = nullptr;
  const ExtentInfo& e = extents_[batch.extent_];
  Status first;
  for (Ticket t : batch.tickets_) {  // every ticket, even after an error: each is consumed once
    Status s = engine_.wait(t);
    if (first.ok() && !s.ok()) {
      first = Status(s.code(), "extent " + quoted(e.name) + ": " + s.message());
    }
  }
  batch.tickets_.clear();
  if (options_.checksums) {
    if (batch.op_ == IoOp::write) {
      settle_checksums(batch, first.ok());
    } else if (first.ok()) {
      first = verify(batch);
    }
  }
  return first;
}

void TensorStore::settle_checksums(const IoBatch& batch, bool ok) {
  std::lock_guard<std::mutex> lock(crc_mu_);
  std::vector<Chunk>& table = chunks_[batch.extent_];
  for (size_t i = 0; i < batch.crcs_.size(); i++) {
    Chunk& c = table[batch.first_chunk_ + i];
    c.crc = batch.crcs_[i];
    c.valid = ok;  // after a failed write the chunk's contents on disk are unknown
  }
}

Status TensorStore::verify(const IoBatch& batch) const {
  const ExtentInfo& e = extents_[batch.extent_];
  const uint64_t su = options_.stripe_unit;
  const uint64_t begin = batch.offset_, end = batch.offset_ + batch.length_;
  for (uint64_t c = (begin + su - 1) / su; c * su < e.bytes && chunk_end(e, c) <= end; c++) {
    Chunk expected;
    {
      std::lock_guard<std::mutex> lock(crc_mu_);
      expected = chunks_[batch.extent_][c];
    }
    if (!expected.valid) continue;
    uint64_t at = c * su;
    uint32_t got = crc32c(batch.buffer_ + (at - begin), chunk_end(e, c) - at);
    if (got != expected.crc) {
      Location loc = locate(e.offset + at);
      return bad_format("checksum mismatch in extent " + quoted(e.name) + " at offset " +
                        std::to_string(at) + " (file " + files_[loc.dir]->path + ", offset " +
                        std::to_string(loc.file_offset) + ")");
    }
  }
  return Status();
}

}  // namespace strata
