#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "core/check.h"

namespace strata {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

using Json = nlohmann::ordered_json;  // keeps header order, so tensors come back in file order

// Headers are a few KB for GPT-2; a larger length field means a corrupt or foreign file.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

std::string where(const std::string& path) {
  return "safetensors " + (path.empty() ? std::string("(in memory)") : path);
}

std::string errno_text(int err) {
  return std::string(std::strerror(err));
}

Status write_error(const std::string& what, const std::string& path, int err) {
  std::string m = where(path) + ": " + what + ": " + errno_text(err);
  if (err == ENOSPC || err == EDQUOT) return Status(ErrorCode::no_space, m);
  return io_error(m);
}

bool parse_dtype(const std::string& s, StDType* out) {
  for (StDType t : {StDType::f32, StDType::bf16, StDType::i32, StDType::u16}) {
    if (s == st_dtype_name(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

// numel of a shape, or -1 if a dimension is negative or the product overflows int64_t.
int64_t checked_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

// Reads exactly n bytes at offset, retrying on EINTR and short reads.
Status pread_full(int fd, const std::string& path, void* buf, int64_t n, int64_t offset) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    ssize_t got = ::pread(fd, p, static_cast<size_t>(n), static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      return io_error(where(path) + ": read at offset " + std::to_string(offset) + ": " +
                      errno_text(errno));
    }
    if (got == 0) {
      return bad_format(where(path) + ": file ends at offset " + std::to_string(offset) +
                        " (truncated while reading)");
    }
    p += got;
    n -= got;
    offset += got;
  }
  return Status::ok_status();
}

Status write_full(int fd, const std::string& path, const void* buf, int64_t n) {
  auto* p = static_cast<const uint8_t*>(buf);
  while (n > 0) {
    ssize_t put = ::write(fd, p, static_cast<size_t>(n));
    if (put < 0) {
      if (errno == EINTR) continue;
      return write_error("write", path, errno);
    }
    p += put;
    n -= put;
  }
  return Status::ok_status();
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes now and reports the result (close can report a deferred write error).
  int close_checked() {
    int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

struct Entry {
  StTensor* tensor;
  uint64_t begin, end;
};

// Fills st.tensors (without data) and st.metadata from a parsed header; entries get the spans.
Status parse_header(const Json& header, uint64_t data_size, SafeTensors* st,
                    std::vector<Entry>* entries) {
  const std::string& path = st->path;
  if (!header.is_object()) return bad_format(where(path) + ": header is not a JSON object");
  st->tensors.reserve(header.size());
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) return bad_format(where(path) + ": __metadata__ is not an object");
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) {
          return bad_format(where(path) + ": __metadata__ value of '" + key + "' is not a string");
        }
        st->metadata[key] = value.get<std::string>();
      }
      continue;
    }
    std::string what = where(path) + ": tensor '" + name + "'";
    if (!info.is_object()) return bad_format(what + ": entry is not an object");
    auto dtype_it = info.find("dtype");
    auto shape_it = info.find("shape");
    auto offsets_it = info.find("data_offsets");
    if (dtype_it == info.end() || shape_it == info.end() || offsets_it == info.end()) {
      return bad_format(what + ": needs dtype, shape and data_offsets");
    }
    StTensor t;
    t.name = name;
    if (!dtype_it->is_string() || !parse_dtype(dtype_it->get<std::string>(), &t.dtype)) {
      return bad_format(what + ": unsupported dtype " + dtype_it->dump() +
                        " (supported: F32, BF16, I32, U16)");
    }
    if (!shape_it->is_array()) return bad_format(what + ": shape is not an array");
    for (const Json& d : *shape_it) {
      if (!d.is_number_unsigned() ||
          d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return bad_format(what + ": bad shape " + shape_it->dump());
      }
      t.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    }
    const Json& offs = *offsets_it;
    if (!offs.is_array() || offs.size() != 2 || !offs[0].is_number_unsigned() ||
        !offs[1].is_number_unsigned()) {
      return bad_format(what + ": data_offsets is not [begin, end]");
    }
    uint64_t begin = offs[0].get<uint64_t>(), end = offs[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return bad_format(what + ": data_offsets [" + std::to_string(begin) + ", " +
                        std::to_string(end) + "] outside the data section of " +
                        std::to_string(data_size) + " bytes");
    }
    int64_t numel = checked_numel(t.shape);
    if (numel < 0 || numel > std::numeric_limits<int64_t>::max() / st_dtype_size(t.dtype) ||
        static_cast<uint64_t>(numel * st_dtype_size(t.dtype)) != end - begin) {
      return bad_format(what + ": shape " + shape_text(t.shape) + " of " + st_dtype_name(t.dtype) +
                        " does not fill data_offsets span of " + std::to_string(end - begin) +
                        " bytes");
    }
    st->tensors.push_back(std::move(t));
    entries->push_back({nullptr, begin, end});
  }
  for (size_t i = 0; i < entries->size(); i++) (*entries)[i].tensor = &st->tensors[i];

  std::vector<Entry> sorted = *entries;
  std::sort(sorted.begin(), sorted.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < sorted.size(); i++) {
    if (sorted[i].begin < sorted[i - 1].end) {
      return bad_format(where(path) + ": tensors '" + sorted[i - 1].tensor->name + "' and '" +
                        sorted[i].tensor->name + "' overlap");
    }
  }
  return Status::ok_status();
}

}  // namespace

std::string safetensors_header_bytes(const nlohmann::ordered_json& header) {
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  std::string out(8, '\0');
  const uint64_t n = text.size();
  std::memcpy(out.data(), &n, 8);
  return out + text;
}

const char* st_dtype_name(StDType t) {
  switch (t) {
    case StDType::f32:
      return "F32";
    case StDType::bf16:
      return "BF16";
    case StDType::i32:
      return "I32";
    case StDType::u16:
      return "U16";
  }
  return "?";
}

int64_t st_dtype_size(StDType t) {
  switch (t) {
    case StDType::f32:
      return 4;
    case StDType::bf16:
      return 2;
    case StDType::i32:
      return 4;
    case StDType::u16:
      return 2;
  }
  return 0;
}

int64_t StTensor::numel() const {
  return checked_numel(shape);
}

const StTensor* SafeTensors::find(const std::string& name) const {
  for (const StTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

void SafeTensors::add(const std::string& name, StDType dtype, std::vector<int64_t> shape,
                      const void* data) {
  STRATA_CHECK_MSG(name != "__metadata__", "reserved safetensors name");
  STRATA_CHECK_MSG(find(name) == nullptr, ("duplicate safetensors name " + name).c_str());
  int64_t numel = checked_numel(shape);
  STRATA_CHECK_MSG(numel >= 0, ("bad shape for safetensors tensor " + name).c_str());
  StTensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data.resize(static_cast<size_t>(numel * st_dtype_size(dtype)));
  if (!t.data.empty()) std::memcpy(t.data.data(), data, t.data.size());
  tensors.push_back(std::move(t));
}

void SafeTensors::add_f32(const std::string& name, std::vector<int64_t> shape, const float* data) {
  add(name, StDType::f32, std::move(shape), data);
}

void SafeTensors::add_i32(const std::string& name, std::vector<int64_t> shape,
                          const int32_t* data) {
  add(name, StDType::i32, std::move(shape), data);
}

namespace {

// The tensor `name`, checked to have `dtype`.
Result<const StTensor*> typed_tensor(const SafeTensors& st, const std::string& name,
                                     StDType dtype) {
  const StTensor* t = st.find(name);
  if (t == nullptr) return not_found(where(st.path) + ": no tensor '" + name + "'");
  if (t->dtype != dtype) {
    return bad_format(where(st.path) + ": tensor '" + name + "' is " + st_dtype_name(t->dtype) +
                      ", expected " + st_dtype_name(dtype));
  }
  return t;
}

template <typename T>
std::vector<T> elements(const StTensor& t) {
  std::vector<T> v(t.data.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), t.data.data(), v.size() * sizeof(T));
  return v;
}

}  // namespace

Result<std::vector<float>> SafeTensors::get_f32(const std::string& name) const {
  STRATA_ASSIGN_OR_RETURN(const StTensor* t, typed_tensor(*this, name, StDType::f32));
  return elements<float>(*t);
}

Result<std::vector<float>> SafeTensors::get_f32(const std::string& name,
                                                const std::vector<int64_t>& shape) const {
  STRATA_ASSIGN_OR_RETURN(const StTensor* t, typed_tensor(*this, name, StDType::f32));
  if (t->shape != shape) {
    return bad_format(where(path) + ": tensor '" + name + "' has shape " + shape_text(t->shape) +
                      ", expected " + shape_text(shape));
  }
  return elements<float>(*t);
}

Result<std::vector<int32_t>> SafeTensors::get_i32(const std::string& name) const {
  STRATA_ASSIGN_OR_RETURN(const StTensor* t, typed_tensor(*this, name, StDType::i32));
  return elements<int32_t>(*t);
}

Result<SafeTensors> parse_safetensors(std::string_view bytes, const std::string& path) {
  SafeTensors st;
  st.path = path;
  const uint64_t file_size = bytes.size();
  if (file_size < 8) {
    return bad_format(where(path) + ": file of " + std::to_string(file_size) +
                      " bytes is too short for the 8-byte header length");
  }
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  if (header_size > file_size - 8 || header_size > kMaxHeaderBytes) {
    return bad_format(where(path) + ": header length " + std::to_string(header_size) +
                      " does not fit in a file of " + std::to_string(file_size) + " bytes");
  }
  Json header = Json::parse(bytes.substr(8, static_cast<size_t>(header_size)), nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded()) return bad_format(where(path) + ": header is not valid JSON");

  const uint64_t data_start = 8 + header_size;
  std::vector<Entry> entries;
  STRATA_RETURN_IF_ERROR(parse_header(header, file_size - data_start, &st, &entries));
  for (Entry& e : entries) {
    const char* begin = bytes.data() + data_start + e.begin;
    e.tensor->data.assign(begin, begin + (e.end - e.begin));
  }
  return st;
}

Result<SafeTensors> read_safetensors(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    std::string m = where(path) + ": open: " + errno_text(errno);
    return errno == ENOENT ? not_found(m) : io_error(m);
  }
  struct stat sb;
  if (::fstat(fd.get(), &sb) != 0) return io_error(where(path) + ": stat: " + errno_text(errno));
  if (!S_ISREG(sb.st_mode)) return bad_format(where(path) + ": not a regular file");
  std::string bytes(static_cast<size_t>(sb.st_size), '\0');
  STRATA_RETURN_IF_ERROR(
      pread_full(fd.get(), path, bytes.data(), static_cast<int64_t>(bytes.size()), 0));
  return parse_safetensors(bytes, path);
}

Status write_safetensors(const std::string& path, const SafeTensors& st) {
  // Build and validate the header first, so a bad table never touches the disk.
  Json header = Json::object();
  if (!st.metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [key, value] : st.metadata) meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const StTensor& t : st.tensors) {
    std::string what = where(path) + ": tensor '" + t.name + "'";
    if (t.name == "__metadata__" || !names.insert(t.name).second) {
      return invalid_argument(what + ": duplicate or reserved name");
    }
    int64_t numel = checked_numel(t.shape);
    if (numel < 0 || static_cast<uint64_t>(numel) * st_dtype_size(t.dtype) != t.data.size()) {
      return invalid_argument(what + ": " + std::to_string(t.data.size()) +
                              " bytes do not match shape " + shape_text(t.shape) + " of " +
                              st_dtype_name(t.dtype));
    }
    header[t.name] = {{"dtype", st_dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  const std::string head = safetensors_header_bytes(header);

  const std::string tmp = path + ".tmp";
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) return write_error("open " + tmp, path, errno);
  Status s = write_full(fd.get(), path, head.data(), static_cast<int64_t>(head.size()));
  for (const StTensor& t : st.tensors) {
    if (!s.ok()) break;
    s = write_full(fd.get(), path, t.data.data(), static_cast<int64_t>(t.data.size()));
  }
  if (s.ok() && ::fsync(fd.get()) != 0) s = write_error("fsync", path, errno);
  if (fd.close_checked() != 0 && s.ok()) s = write_error("close", path, errno);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = write_error("rename " + tmp, path, errno);
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  // Make the rename itself durable.
  std::string dir = std::filesystem::path(path).parent_path().string();
  Fd dir_fd(::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() < 0) return write_error("open directory", path, errno);
  if (::fsync(dir_fd.get()) != 0) return write_error("fsync directory", path, errno);
  return Status::ok_status();
}

}  // namespace strata
