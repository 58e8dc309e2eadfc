// TensorStore::save_checksums / load_checksums: the checksum table on disk.
//
// Format (host byte order, little-endian on every supported host):
//   "STRCRC01"                      8 bytes
//   u64 stripe_unit, u64 extent count
//   per extent: u64 name length, name, u64 bytes, u64 chunk count,
//               per chunk: u32 crc, u8 valid
//   u32 CRC32C of everything before it
// The layout fields are stored so that a table is never applied to another layout.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/file_util.h"
#include "core/output_file.h"
#include "io/crc32c.h"
#include "io/tensor_store.h"

namespace strata {

namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'C', 'R', 'C', '0', '1'};

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// Reads fields in order; any read past the end marks the whole parse as failed.
struct Reader {
  const std::string& data;
  size_t pos = 0;
  bool short_read = false;
  template <typename T>
  T get() {
    T v{};
    if (data.size() - pos < sizeof v) {
      short_read = true;
      pos = data.size();
      return v;
    }
    std::memcpy(&v, data.data() + pos, sizeof v);
    pos += sizeof v;
    return v;
  }
  std::string bytes(uint64_t n) {
    if (data.size() - pos < n) {
      short_read = true;
      pos = data.size();
      return "";
    }
    std::string s = data.substr(pos, n);
    pos += n;
    return s;
  }
};

// Note [Writing an output file]: a crash leaves either the old table or the new one.
Status write_atomically(const std::string& path, const std::string& bytes) {
  STRATA_ASSIGN_OR_RETURN(OutputFile out, OutputFile::create(path, "checksum file"));
  STRATA_RETURN_IF_ERROR(out.write(bytes.data(), static_cast<int64_t>(bytes.size())));
  return out.commit();
}

}  // namespace

Status TensorStore::save_checksums(const std::string& path) const {
  if (!options_.checksums) {
    return invalid_argument("save_checksums " + path + ": the store was created without checksums");
  }
  std::string out(kMagic, sizeof kMagic);
  put<uint64_t>(out, options_.stripe_unit);
  put<uint64_t>(out, extents_.size());
  {
    std::lock_guard<std::mutex> lock(crc_mu_);
    for (size_t i = 0; i < extents_.size(); i++) {
      put<uint64_t>(out, extents_[i].name.size());
      out += extents_[i].name;
      put<uint64_t>(out, extents_[i].bytes);
      put<uint64_t>(out, chunks_[i].size());
      for (const Chunk& c : chunks_[i]) {
        put<uint32_t>(out, c.crc);
        put<uint8_t>(out, c.valid ? 1 : 0);
      }
    }
  }
  put<uint32_t>(out, crc32c(out.data(), out.size()));
  return write_atomically(path, out);
}

Status TensorStore::load_checksums(const std::string& path) {
  if (!options_.checksums) {
    return invalid_argument("load_checksums " + path + ": the store was created without checksums");
  }
  STRATA_ASSIGN_OR_RETURN(std::string data, read_whole_file(path, "checksum file"));
  auto bad = [&path](const std::string& why) {
    return bad_format("checksum file " + path + ": " + why);
  };
  if (data.size() < sizeof kMagic + 4 || std::memcmp(data.data(), kMagic, sizeof kMagic) != 0) {
    return bad("not a Strata checksum file (bad magic)");
  }
  uint32_t stored;
  std::memcpy(&stored, data.data() + data.size() - 4, 4);
  if (crc32c(data.data(), data.size() - 4) != stored) return bad("file is corrupt (CRC mismatch)");
  data.resize(data.size() - 4);

  Reader r{data, sizeof kMagic};
  uint64_t su = r.get<uint64_t>();
  if (su != options_.stripe_unit) {
    return bad("stripe_unit " + std::to_string(su) + " differs from the store's " +
               std::to_string(options_.stripe_unit));
  }
  uint64_t count = r.get<uint64_t>();
  if (count != extents_.size()) {
    return bad("holds " + std::to_string(count) + " extents, the store has " +
               std::to_string(extents_.size()));
  }
  std::vector<std::vector<Chunk>> table(extents_.size());
  for (size_t i = 0; i < extents_.size() && !r.short_read; i++) {
    const ExtentInfo& e = extents_[i];
    std::string name = r.bytes(r.get<uint64_t>());
    uint64_t bytes = r.get<uint64_t>();
    uint64_t chunks = r.get<uint64_t>();
    if (r.short_read) break;
    std::string which = "extent " + std::to_string(i);
    if (name != e.name) return bad(which + " is '" + name + "', the store's is '" + e.name + "'");
    if (bytes != e.bytes) {
      return bad(which + " '" + name + "' has " + std::to_string(bytes) + " bytes, the store's " +
                 std::to_string(e.bytes));
    }
    if (chunks != chunks_[i].size()) return bad(which + " '" + name + "' has a wrong chunk count");
    table[i].resize(chunks);
    for (Chunk& c : table[i]) {
      c.crc = r.get<uint32_t>();
      c.valid = r.get<uint8_t>() != 0;
    }
  }
  if (r.short_read) return bad("truncated");
  if (r.pos != data.size()) return bad("trailing bytes after the last extent");
  std::lock_guard<std::mutex> lock(crc_mu_);
  chunks_ = std::move(table);
  return Status();
}

}  // namespace strata
