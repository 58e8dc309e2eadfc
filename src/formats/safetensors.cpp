#include "formats/safetensors.h"

#include <fcntl.h>
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
#include "core/file_util.h"
#include "core/format.h"
#include "core/json_util.h"
#include "core/output_file.h"

namespace strata {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

using Json = nlohmann::ordered_json;  // keeps header order, so tensors come back in file order

// Headers are a few KB for GPT-2; a larger length field means a corrupt or foreign file.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

std::string where(const std::string& path) {
  return "safetensors " + (path.empty() ? std::string("(in memory)") : path);
}

// A name or key read from a header, for a one-line message: escaped and cut.
std::string shown(const std::string& name) {
  constexpr size_t kMax = 80;
  return printable(name.substr(0, kMax)) + (name.size() > kMax ? "..." : "");
}

bool parse_dtype(const std::string& s, StDType* out) {
  for (StDType t : {StDType::f32, StDType::bf16, StDType::f16, StDType::i32, StDType::u16}) {
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

// The entries (header order, offsets from the start of the file) and metadata of a parsed
// header whose data section starts at `data_start` and holds `data_size` bytes.
Status parse_header(const Json& header, uint64_t data_start, uint64_t data_size,
                    SafeTensorsHeader* out) {
  const std::string& path = out->path;
  if (!header.is_object()) return bad_format(where(path) + ": header is not a JSON object");
  out->tensors.reserve(header.size());
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) return bad_format(where(path) + ": __metadata__ is not an object");
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) {
          return bad_format(where(path) + ": __metadata__ value of '" + shown(key) +
                            "' is not a string");
        }
        out->metadata[key] = value.get<std::string>();
      }
      continue;
    }
    std::string what = where(path) + ": tensor '" + shown(name) + "'";
    if (!info.is_object()) return bad_format(what + ": entry is not an object");
    auto dtype_it = info.find("dtype");
    auto shape_it = info.find("shape");
    auto offsets_it = info.find("data_offsets");
    if (dtype_it == info.end() || shape_it == info.end() || offsets_it == info.end()) {
      return bad_format(what + ": needs dtype, shape and data_offsets");
    }
    StEntry e;
    e.name = name;
    if (!dtype_it->is_string() || !parse_dtype(dtype_it->get<std::string>(), &e.dtype)) {
      return bad_format(what + ": unsupported dtype " + json_preview(*dtype_it) +
                        " (supported: F32, BF16, F16, I32, U16)");
    }
    if (!shape_it->is_array()) return bad_format(what + ": shape is not an array");
    for (const Json& d : *shape_it) {
      if (!d.is_number_unsigned() ||
          d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return bad_format(what + ": bad shape " + json_preview(*shape_it));
      }
      e.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
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
    int64_t numel = checked_numel(e.shape);
    if (numel < 0 || numel > std::numeric_limits<int64_t>::max() / st_dtype_size(e.dtype) ||
        static_cast<uint64_t>(numel * st_dtype_size(e.dtype)) != end - begin) {
      return bad_format(what + ": shape " + shape_text(e.shape) + " of " + st_dtype_name(e.dtype) +
                        " does not fill data_offsets span of " + std::to_string(end - begin) +
                        " bytes");
    }
    e.offset = static_cast<int64_t>(data_start + begin);
    e.bytes = static_cast<int64_t>(end - begin);
    out->tensors.push_back(std::move(e));
  }

  std::vector<const StEntry*> sorted;
  for (const StEntry& e : out->tensors) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](const StEntry* a, const StEntry* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->bytes < b->bytes;
  });
  for (size_t i = 1; i < sorted.size(); i++) {
    if (sorted[i]->offset < sorted[i - 1]->offset + sorted[i - 1]->bytes) {
      return bad_format(where(path) + ": tensors '" + shown(sorted[i - 1]->name) + "' and '" +
                        shown(sorted[i]->name) + "' overlap");
    }
  }
  return Status::ok_status();
}

// The header length field, checked against the file's size.
Result<uint64_t> header_length(const uint8_t* first8, uint64_t file_size, const std::string& path) {
  uint64_t header_size = 0;
  std::memcpy(&header_size, first8, 8);
  if (header_size > file_size - 8 || header_size > kMaxHeaderBytes) {
    return bad_format(where(path) + ": header length " + std::to_string(header_size) +
                      " does not fit in a file of " + std::to_string(file_size) + " bytes");
  }
  return header_size;
}

Status check_has_header_length(uint64_t file_size, const std::string& path) {
  if (file_size >= 8) return Status::ok_status();
  return bad_format(where(path) + ": file of " + std::to_string(file_size) +
                    " bytes is too short for the 8-byte header length");
}

// The header of a file of `file_size` bytes from its JSON text (the bytes after the length).
Result<SafeTensorsHeader> parse_header_text(std::string_view text, uint64_t file_size,
                                            const std::string& path) {
  SafeTensorsHeader h;
  h.path = path;
  h.file_bytes = static_cast<int64_t>(file_size);
  // Note [Bounded JSON nesting]: a header nested deeper than any safetensors header is refused
  // before it is parsed.
  STRATA_ASSIGN_OR_RETURN(Json header, parse_json<Json>(text, where(path) + " header",
                                                        JsonSyntax{.unique_keys = true}));
  const uint64_t data_start = 8 + text.size();
  STRATA_RETURN_IF_ERROR(parse_header(header, data_start, file_size - data_start, &h));
  return h;
}

// The entry named `name` of a tensor list (StTensor or StEntry), or null.
template <typename T>
const T* find_named(const std::vector<T>& list, const std::string& name) {
  for (const T& t : list) {
    if (t.name == name) return &t;
  }
  return nullptr;
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
    case StDType::f16:
      return "F16";
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
    case StDType::f16:
      return 2;
    case StDType::i32:
      return 4;
    case StDType::u16:
      return 2;
  }
  return 0;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

int64_t StTensor::numel() const {
  return checked_numel(shape);
}

const StTensor* SafeTensors::find(const std::string& name) const {
  return find_named(tensors, name);
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

// A tensor's dtype and shape checked against those wanted; the messages of get_f32.
Status check_dtype(const std::string& path, const std::string& name, StDType have, StDType want) {
  if (have == want) return Status::ok_status();
  return bad_format(where(path) + ": tensor '" + name + "' is " + st_dtype_name(have) +
                    ", expected " + st_dtype_name(want));
}

Status check_shape(const std::string& path, const std::string& name,
                   const std::vector<int64_t>& have, const std::vector<int64_t>& want) {
  if (have == want) return Status::ok_status();
  return bad_format(where(path) + ": tensor '" + name + "' has shape " + shape_text(have) +
                    ", expected " + shape_text(want));
}

// The tensor `name`, checked to have `dtype`.
Result<const StTensor*> typed_tensor(const SafeTensors& st, const std::string& name,
                                     StDType dtype) {
  const StTensor* t = st.find(name);
  if (t == nullptr) return not_found(where(st.path) + ": no tensor '" + name + "'");
  STRATA_RETURN_IF_ERROR(check_dtype(st.path, name, t->dtype, dtype));
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
  STRATA_RETURN_IF_ERROR(check_shape(path, name, t->shape, shape));
  return elements<float>(*t);
}

Result<std::vector<int32_t>> SafeTensors::get_i32(const std::string& name) const {
  STRATA_ASSIGN_OR_RETURN(const StTensor* t, typed_tensor(*this, name, StDType::i32));
  return elements<int32_t>(*t);
}

int64_t StEntry::numel() const {
  return checked_numel(shape);
}

const StEntry* SafeTensorsHeader::find(const std::string& name) const {
  return find_named(tensors, name);
}

Result<const StEntry*> SafeTensorsHeader::f32_entry(const std::string& name,
                                                    const std::vector<int64_t>& shape) const {
  const StEntry* e = find(name);
  if (e == nullptr) return not_found(where(path) + ": no tensor '" + name + "'");
  STRATA_RETURN_IF_ERROR(check_dtype(path, name, e->dtype, StDType::f32));
  STRATA_RETURN_IF_ERROR(check_shape(path, name, e->shape, shape));
  return e;
}

Result<SafeTensors> parse_safetensors(std::string_view bytes, const std::string& path) {
  const uint64_t file_size = bytes.size();
  STRATA_RETURN_IF_ERROR(check_has_header_length(file_size, path));
  STRATA_ASSIGN_OR_RETURN(
      uint64_t header_size,
      header_length(reinterpret_cast<const uint8_t*>(bytes.data()), file_size, path));
  STRATA_ASSIGN_OR_RETURN(
      SafeTensorsHeader h,
      parse_header_text(bytes.substr(8, static_cast<size_t>(header_size)), file_size, path));
  SafeTensors st;
  st.path = path;
  st.metadata = std::move(h.metadata);
  st.tensors.reserve(h.tensors.size());
  for (StEntry& e : h.tensors) {
    StTensor t;
    t.name = std::move(e.name);
    t.dtype = e.dtype;
    t.shape = std::move(e.shape);
    const char* begin = bytes.data() + e.offset;
    t.data.assign(begin, begin + e.bytes);
    st.tensors.push_back(std::move(t));
  }
  return st;
}

Result<SafeTensors> read_safetensors(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(ReadOnlyFile f, ReadOnlyFile::open(path, "safetensors"));
  std::string bytes(static_cast<size_t>(f.size()), '\0');
  STRATA_RETURN_IF_ERROR(f.read_at(bytes.data(), f.size(), 0));
  return parse_safetensors(bytes, path);
}

Result<SafeTensorsHeader> read_safetensors_header(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(ReadOnlyFile f, ReadOnlyFile::open(path, "safetensors"));
  const auto file_size = static_cast<uint64_t>(f.size());
  STRATA_RETURN_IF_ERROR(check_has_header_length(file_size, path));
  uint8_t first8[8];
  STRATA_RETURN_IF_ERROR(f.read_at(first8, 8, 0));
  STRATA_ASSIGN_OR_RETURN(uint64_t header_size, header_length(first8, file_size, path));
  std::string text(static_cast<size_t>(header_size), '\0');
  STRATA_RETURN_IF_ERROR(f.read_at(text.data(), static_cast<int64_t>(header_size), 8));
  return parse_header_text(text, file_size, path);
}

namespace {

// The header of a file whose tensors lie back to back in the order given.
Result<std::string> header_for(const std::string& path, const std::vector<StEntry>& tensors,
                               const std::map<std::string, std::string>& metadata,
                               int64_t* data_bytes) {
  Json header = Json::object();
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const StEntry& t : tensors) {
    std::string what = where(path) + ": tensor '" + t.name + "'";
    if (t.name == "__metadata__" || !names.insert(t.name).second) {
      return invalid_argument(what + ": duplicate or reserved name");
    }
    const int64_t numel = checked_numel(t.shape);
    if (numel < 0 || numel > std::numeric_limits<int64_t>::max() / st_dtype_size(t.dtype)) {
      return invalid_argument(what + ": bad shape " + shape_text(t.shape));
    }
    const auto bytes = static_cast<uint64_t>(numel * st_dtype_size(t.dtype));
    header[t.name] = {{"dtype", st_dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  *data_bytes = static_cast<int64_t>(offset);
  return safetensors_header_bytes(header);
}

}  // namespace

Result<SafeTensorsWriter> SafeTensorsWriter::create(
    const std::string& path, const std::vector<StEntry>& tensors,
    const std::map<std::string, std::string>& metadata) {
  int64_t data_bytes = 0;
  STRATA_ASSIGN_OR_RETURN(std::string head, header_for(path, tensors, metadata, &data_bytes));
  STRATA_ASSIGN_OR_RETURN(OutputFile out, OutputFile::create(path, "safetensors"));
  SafeTensorsWriter w(path, std::move(out), data_bytes);
  STRATA_RETURN_IF_ERROR(w.out_.write(head.data(), static_cast<int64_t>(head.size())));
  return w;
}

Status SafeTensorsWriter::append(const void* data, int64_t bytes) {
  if (bytes > data_bytes_ - written_) {
    return invalid_argument(where(path_) + ": " + std::to_string(bytes) + " bytes at data offset " +
                            std::to_string(written_) + " run past the " +
                            std::to_string(data_bytes_) + " bytes the header describes");
  }
  STRATA_RETURN_IF_ERROR(out_.write(data, bytes));
  written_ += bytes;
  return Status::ok_status();
}

Status SafeTensorsWriter::finish() {
  if (written_ != data_bytes_) {
    return invalid_argument(where(path_) + ": " + std::to_string(written_) +
                            " bytes of data written, the header describes " +
                            std::to_string(data_bytes_));
  }
  return out_.commit();
}

Status write_safetensors(const std::string& path, const SafeTensors& st) {
  // Validate the table first, so a bad one never touches the disk.
  std::vector<StEntry> entries;
  for (const StTensor& t : st.tensors) {
    const int64_t numel = checked_numel(t.shape);
    if (numel < 0 || static_cast<uint64_t>(numel) * st_dtype_size(t.dtype) != t.data.size()) {
      return invalid_argument(where(path) + ": tensor '" + t.name +
                              "': " + std::to_string(t.data.size()) + " bytes do not match shape " +
                              shape_text(t.shape) + " of " + st_dtype_name(t.dtype));
    }
    entries.push_back({t.name, t.dtype, t.shape, 0, static_cast<int64_t>(t.data.size())});
  }
  STRATA_ASSIGN_OR_RETURN(SafeTensorsWriter w,
                          SafeTensorsWriter::create(path, entries, st.metadata));
  for (const StTensor& t : st.tensors) {
    STRATA_RETURN_IF_ERROR(w.append(t.data.data(), static_cast<int64_t>(t.data.size())));
  }
  return w.finish();
}

}  // namespace strata
