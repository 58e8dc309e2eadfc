#include "data/tokenizer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/log.h"
#include "data/bpe_tokenizer.h"
#include "data/byte_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"

namespace strata {

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix.data(), suffix.size()) == 0;
}

// Whether the file's first byte that is not whitespace is '{'.
bool looks_like_json(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[64];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  for (ssize_t i = 0; i < n; ++i) {
    if (buf[i] == ' ' || buf[i] == '\n' || buf[i] == '\r' || buf[i] == '\t') continue;
    return buf[i] == '{';
  }
  return false;
}

// Reads up to n bytes, appended to *buf; fewer only at the end of the file.
Status read_some(int fd, int64_t n, std::string* buf, const std::string& path, int64_t* got) {
  const size_t old = buf->size();
  buf->resize(old + static_cast<size_t>(n));
  int64_t have = 0;
  while (have < n) {
    const ssize_t r = ::read(fd, buf->data() + old + have, static_cast<size_t>(n - have));
    if (r < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      buf->resize(old);
      return io_error("cannot read text file " + path + ": " + std::strerror(err));
    }
    if (r == 0) break;
    have += r;
  }
  buf->resize(old + static_cast<size_t>(have));
  *got = have;
  return Status::ok_status();
}

}  // namespace

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text) {
  std::vector<int32_t> ids;
  STRATA_RETURN_IF_ERROR(encode_append(text, &ids));
  return ids;
}

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path,
                                                  const TokenizerOptions& options) {
  if (path == "byte") return std::unique_ptr<Tokenizer>(new ByteTokenizer());
  std::error_code ec;
  std::string file = path;
  if (std::filesystem::is_directory(path, ec)) {
    const std::string json = path + "/tokenizer.json", model = path + "/tokenizer.model";
    if (std::filesystem::exists(json, ec)) {
      file = json;
    } else if (std::filesystem::exists(model, ec)) {
      file = model;
    } else {
      return not_found("tokenizer directory " + path +
                       " holds neither tokenizer.json nor tokenizer.model");
    }
  } else if (!std::filesystem::exists(path, ec)) {
    return not_found("tokenizer " + path + " does not exist");
  }
  if (ends_with(file, ".json") || (!ends_with(file, ".model") && looks_like_json(file))) {
    auto t = BpeTokenizer::load(file, options);
    if (t.ok()) return std::unique_ptr<Tokenizer>(std::move(*t));
    // A Llama 2 or Mistral directory: its tokenizer.json (a Metaspace normalizer, byte fallback)
    // may be beyond the BPE reader while the tokenizer.model beside it is the original.
    const std::string model = path + "/tokenizer.model";
    if (file == path + "/tokenizer.json" && t.status().code() == ErrorCode::bad_format &&
        std::filesystem::exists(model, ec)) {
      log_info("tokenizer: " + t.status().message() + "; reading " + model + " instead");
      file = model;
    } else {
      return t.status();
    }
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<SentencePieceTokenizer> t,
                          SentencePieceTokenizer::load(file));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

Status encode_file(Tokenizer& tok, const std::string& path, int64_t chunk_bytes,
                   const std::function<Status(std::span<const int32_t>)>& sink,
                   EncodeStats* stats) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return not_found("text file " + path + " does not exist");
    return io_error("cannot open text file " + path + ": " + std::strerror(err));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};

  *stats = EncodeStats();
  const size_t piece_bytes = static_cast<size_t>(std::min(chunk_bytes, kEncodePieceBytes));
  std::vector<int32_t> ids;
  const auto emit = [&](std::string_view piece) -> Status {
    ids.clear();
    STRATA_RETURN_IF_ERROR(tok.encode_append(piece, &ids));
    stats->pieces++;
    stats->largest_piece = std::max(stats->largest_piece, static_cast<int64_t>(piece.size()));
    stats->tokens += static_cast<int64_t>(ids.size());
    return ids.empty() ? Status::ok_status() : sink(ids);
  };
  std::string buf;      // text read and not encoded yet
  size_t searched = 0;  // buf[0, searched) holds no cut, but perhaps in its last few bytes
  bool eof = false;
  while (!eof) {
    int64_t got = 0;
    STRATA_RETURN_IF_ERROR(read_some(fd, chunk_bytes, &buf, path, &got));
    stats->text_bytes += got;
    eof = got < chunk_bytes;
    const std::string_view text(buf);
    size_t start = 0;
    while (start < text.size()) {
      const std::string_view rest = text.substr(start);
      std::optional<TextCut> cut;
      if (rest.size() <= piece_bytes) {
        if (!eof) break;  // read on: a cut needs the text after it
        cut = TextCut{rest.size(), rest.size()};
      } else {
        // The last cut in the first piece_bytes, else in twice as much, and so on, each search
        // reading only what the one before did not (nor, after a read, what an earlier search
        // of this text found without a cut); none in all the text read: read on, or at the end
        // of the file take the rest.
        size_t w = std::min(rest.size(), piece_bytes), from = 0;
        if (searched > start + w) {
          w = searched - start;
          from = w > 8 ? w - 8 : 0;
        }
        while (!(cut = tok.find_cut(rest.substr(0, w), from)) && w < rest.size()) {
          from = w > 8 ? w - 8 : 0;
          w = std::min(rest.size(), 2 * w);
        }
        if (!cut) searched = text.size();
        if (!cut && !eof) break;
        if (!cut) cut = TextCut{rest.size(), rest.size()};
      }
      STRATA_RETURN_IF_ERROR(emit(rest.substr(0, cut->end)));
      start += cut->resume;
    }
    buf.erase(0, start);
    searched = searched > start ? searched - start : 0;
  }
  return Status::ok_status();
}

}  // namespace strata
