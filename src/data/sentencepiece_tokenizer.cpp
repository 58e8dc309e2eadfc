#include "data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <exception>

namespace strata {

namespace {

// Just enough of the protobuf wire format to read a few scalar fields of sentencepiece's
// ModelProto (sentencepiece_model.proto): the library does not install the message's header.
class ProtoReader {
 public:
  explicit ProtoReader(std::string_view bytes) : s_(bytes) {}

  // The next field: its number, wire type, and for varints the value, for length-delimited
  // fields the bytes. false at the end or on malformed input.
  bool next(uint32_t* field, uint32_t* wire, uint64_t* value, std::string_view* bytes) {
    uint64_t key;
    if (pos_ >= s_.size() || !varint(&key)) return false;
    *field = static_cast<uint32_t>(key >> 3);
    *wire = static_cast<uint32_t>(key & 7);
    switch (*wire) {
      case 0:
        return varint(value);
      case 1:
        return skip(8);
      case 2: {
        uint64_t n;
        if (!varint(&n) || n > s_.size() - pos_) return false;
        *bytes = s_.substr(pos_, n);
        pos_ += n;
        return true;
      }
      case 5:
        return skip(4);
      default:
        return false;
    }
  }

 private:
  bool varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64 && pos_ < s_.size(); shift += 7) {
      const auto b = static_cast<unsigned char>(s_[pos_++]);
      *v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  bool skip(size_t n) {
    if (n > s_.size() - pos_) return false;
    pos_ += n;
    return true;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

// A varint field (bool, enum, int) of a nested message of the model (ModelProto field
// `message`), or `fallback` (the proto2 default) when absent.
uint64_t proto_varint(std::string_view model, uint32_t message, uint32_t flag, uint64_t fallback) {
  ProtoReader top(model);
  uint32_t field, wire;
  uint64_t value = 0;
  std::string_view bytes;
  uint64_t result = fallback;
  while (top.next(&field, &wire, &value, &bytes)) {
    if (field != message || wire != 2) continue;
    ProtoReader inner(bytes);
    uint32_t f, w;
    uint64_t v = 0;
    std::string_view b;
    while (inner.next(&f, &w, &v, &b)) {
      if (f == flag && w == 0) result = v;
    }
  }
  return result;
}

// ModelProto: trainer_spec = 2 (model_type = 3, treat_whitespace_as_suffix = 24),
// normalizer_spec = 3 (add_dummy_prefix = 3, escape_whitespaces = 5).
constexpr uint32_t kTrainerSpec = 2, kNormalizerSpec = 3;
constexpr uint32_t kModelType = 3, kTreatWhitespaceAsSuffix = 24;
constexpr uint32_t kAddDummyPrefix = 3, kEscapeWhitespaces = 5;
constexpr uint64_t kUnigram = 1, kBpe = 2, kWord = 3, kChar = 4;  // TrainerSpec.ModelType

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's "▁"

bool ascii_letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer()
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

Result<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::load(
    const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return not_found("tokenizer " + path + " does not exist");
    return io_error("cannot stat tokenizer " + path + ": " + std::strerror(errno));
  }
  std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  t->path_ = path;
  std::string m;
  try {
    const auto s = t->sp_->Load(path);
    if (!s.ok()) m = s.ToString();
  } catch (const std::exception& e) {
    // Its trie builder (darts_clone) throws for some models, e.g. a piece "\0" (an empty key).
    m = e.what();
  }
  if (!m.empty()) {
    for (char& c : m) c = c == '\n' ? ' ' : c;
    return bad_format("tokenizer " + path + " is not a SentencePiece model: " + m);
  }
  t->vocab_size_ = t->sp_->GetPieceSize();

  const std::string model = t->sp_->serialized_model_proto();
  const uint64_t model_type = proto_varint(model, kTrainerSpec, kModelType, kUnigram);
  if (model_type == kUnigram) {
    t->cut_refusal_ = "a unigram model's segmentation depends on the text before it";
  } else if (model_type == kWord) {
    // Found by fuzz_sentencepiece_model: a word model's unknown words are whole pieces ("▁"
    // included), so adjacent ones join into one <unk> that a cut between them splits in two.
    t->cut_refusal_ = "a word model joins adjacent unknown words into one <unk>";
  } else if (model_type != kBpe && model_type != kChar) {
    // Found by fuzz_sentencepiece_model: protobuf keeps a value outside the enum aside and the
    // library falls back to a model of its choosing; the raw value we read says nothing.
    t->cut_refusal_ =
        "the model's type " + std::to_string(model_type) + " is not a type SentencePiece defines";
  } else if (!proto_varint(model, kNormalizerSpec, kAddDummyPrefix, 1)) {
    t->cut_refusal_ = "the model adds no dummy prefix";
  } else if (!proto_varint(model, kNormalizerSpec, kEscapeWhitespaces, 1)) {
    t->cut_refusal_ = "the model does not escape whitespace";
  } else if (proto_varint(model, kTrainerSpec, kTreatWhitespaceAsSuffix, 0)) {
    t->cut_refusal_ = "the model treats whitespace as a suffix";
  } else if (const int space = t->sp_->PieceToId(kSpaceMark);
             t->sp_->IsUnknown(space) || t->sp_->IsControl(space) || t->sp_->IsUnused(space)) {
    // SentencePiece joins a run of unknown characters into one <unk>: without "▁" a run could
    // span the cut ("x▁x" is one id in "ax xa", two ids in "ax" and "xa").
    t->cut_refusal_ = "the model has no piece \"▁\", so a run of unknown characters can span words";
  } else {
    for (int id = 0; id < t->sp_->GetPieceSize(); ++id) {
      const std::string& piece = t->sp_->IdToPiece(id);
      if (piece.find(kSpaceMark, 1) != std::string::npos) {
        t->cut_refusal_ = "piece " + std::to_string(id) + " spans a word boundary";
        break;
      }
    }
  }
  return t;
}

Status SentencePieceTokenizer::encode_append(std::string_view text, std::vector<int32_t>* ids) {
  std::vector<int> out;
  const auto s = sp_->Encode(text, &out);
  if (!s.ok()) {
    // A model libsentencepiece loads may still fail on some texts, e.g. one holding a CONTROL
    // piece of one character (its id is dropped, so the text is not "consumed"): the model's fault.
    std::string m = s.ToString();
    for (char& c : m) c = c == '\n' ? ' ' : c;
    return bad_format("tokenizer " + path_ + " cannot encode the text: " + m);
  }
  ids->insert(ids->end(), out.begin(), out.end());
  return Status::ok_status();
}

Result<std::string> SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  std::vector<int> in(ids.begin(), ids.end());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] < 0 || in[i] >= vocab_size_) {
      return invalid_argument("token id " + std::to_string(in[i]) + " at position " +
                              std::to_string(i) + " is not in the vocabulary of tokenizer " +
                              path_);
    }
  }
  std::string text;
  const auto s = sp_->Decode(in, &text);
  if (!s.ok()) return internal_error("SentencePiece " + path_ + ": " + s.ToString());
  return text;
}

std::optional<TextCut> SentencePieceTokenizer::find_cut(std::string_view text, size_t from) const {
  if (!cut_refusal_.empty() || text.size() < 3) return std::nullopt;
  for (size_t p = text.size() - 2; p >= 1 && p >= from; --p) {
    if (text[p] == ' ' && ascii_letter(text[p - 1]) && ascii_letter(text[p + 1])) {
      return TextCut{p, p + 1};
    }
  }
  return std::nullopt;
}

}  // namespace strata
