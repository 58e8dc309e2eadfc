// Reading a Hugging Face tokenizer.json into a BpeTokenizer (what is read and what is refused:
// bpe_tokenizer.h): the pre-tokenizer, the vocabulary, the merges and the added tokens.
#include <algorithm>
#include <cstdio>

#include "core/file_util.h"
#include "core/json_util.h"
#include "core/utf8.h"
#include "data/bpe_tokenizer.h"

namespace strata {

namespace {

using nlohmann::json;

// Token ids above this are refused: the id table is allocated up to the largest id.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

// A token string's bytes, or the first code point outside the byte alphabet.
struct TokenBytes {
  std::string bytes;
  uint32_t bad_cp = 0;
  bool ok = true;
};

TokenBytes token_bytes(std::string_view s) {
  TokenBytes t;
  for (size_t i = 0; i < s.size();) {
    const Utf8Char c = decode_utf8(s, i);
    const int b = c.cp == kInvalidCodePoint ? -1 : byte_from_unicode(c.cp);
    if (b < 0) {
      t.ok = false;
      t.bad_cp = c.cp;
      return t;
    }
    t.bytes.push_back(static_cast<char>(b));
    i += c.len;
  }
  return t;
}

// The errors of one file: "tokenizer <path>: <field> <what>".
struct Errors {
  std::string path;
  Status operator()(const std::string& field, const std::string& what) const {
    return bad_format("tokenizer " + path + ": " + field + " " + what);
  }
};

std::string quoted(const json& v) {
  return json_preview(v, 80);
}

// A boolean field that may be absent (then `fallback`, Hugging Face's default).
Result<bool> bool_field(const json& obj, const std::string& key, bool fallback,
                        const std::string& field, const Errors& err) {
  auto it = obj.find(key);
  if (it == obj.end()) return fallback;
  if (!it->is_boolean()) return err(field + "." + key, "is " + quoted(*it) + ", not a boolean");
  return it->get<bool>();
}

// A field that must be absent, null, false or "" (a feature Strata does not implement).
Status must_be_off(const json& obj, const std::string& key, const std::string& field,
                   const Errors& err) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return Status::ok_status();
  if ((it->is_boolean() && !it->get<bool>()) || (it->is_string() && it->get<std::string>().empty()))
    return Status::ok_status();
  return err(field + "." + key, "is " + quoted(*it) + ", which is not supported");
}

Status check_byte_level(const json& p, const std::string& field, bool want_regex,
                        const Errors& err) {
  STRATA_ASSIGN_OR_RETURN(bool prefix, bool_field(p, "add_prefix_space", true, field, err));
  if (prefix) return err(field + ".add_prefix_space", "is true, which is not supported");
  STRATA_ASSIGN_OR_RETURN(bool use_regex, bool_field(p, "use_regex", true, field, err));
  if (use_regex != want_regex) {
    return err(field + ".use_regex",
               want_regex ? "is false: a ByteLevel pre-tokenizer alone must split "
                            "with its regex"
                          : "is true after a Split: splitting twice is not supported");
  }
  return Status::ok_status();
}

std::string type_of(const json& p) {
  auto it = p.find("type");
  return it != p.end() && it->is_string() ? it->get<std::string>() : std::string();
}

Result<PretokenPattern> split_pattern(const json& split, const std::string& field,
                                      const Errors& err) {
  auto pat = split.find("pattern");
  if (pat == split.end() || !pat->is_object() || !pat->contains("Regex") ||
      !(*pat)["Regex"].is_string()) {
    return err(field + ".pattern", "must be {\"Regex\": ...} (GPT-2's or Llama 3's pattern)");
  }
  const std::string re = (*pat)["Regex"].get<std::string>();
  PretokenPattern p;
  if (re == kGpt2Pattern) {
    p = PretokenPattern::gpt2;
  } else if (re == kLlama3Pattern) {
    p = PretokenPattern::llama3;
  } else {
    return err(
        field + ".pattern.Regex",
        "is not one of the supported patterns (GPT-2's, Llama 3's): " + quoted((*pat)["Regex"]));
  }
  auto behavior = split.find("behavior");
  if (behavior == split.end() || *behavior != "Isolated") {
    return err(field + ".behavior", "must be \"Isolated\"");
  }
  STRATA_ASSIGN_OR_RETURN(bool invert, bool_field(split, "invert", false, field, err));
  if (invert) return err(field + ".invert", "is true, which is not supported");
  return p;
}

Result<PretokenPattern> parse_pre_tokenizer(const json& root, const Errors& err) {
  auto it = root.find("pre_tokenizer");
  if (it == root.end() || !it->is_object()) {
    return err("pre_tokenizer",
               "is missing: only byte-level BPE (ByteLevel, or a Split and "
               "ByteLevel) is supported");
  }
  const json& p = *it;
  const std::string type = type_of(p);
  if (type == "ByteLevel") {
    STRATA_RETURN_IF_ERROR(check_byte_level(p, "pre_tokenizer", true, err));
    return PretokenPattern::gpt2;
  }
  if (type != "Sequence") {
    return err("pre_tokenizer.type", "is " + quoted(p.value("type", json())) +
                                         ": only ByteLevel, or a Sequence of Split and "
                                         "ByteLevel, is supported");
  }
  auto list = p.find("pretokenizers");
  if (list == p.end() || !list->is_array() || list->empty() || list->size() > 2) {
    return err("pre_tokenizer.pretokenizers", "must be [ByteLevel] or [Split, ByteLevel]");
  }
  const json& first = (*list)[0];
  if (list->size() == 1) {
    if (type_of(first) != "ByteLevel") {
      return err("pre_tokenizer.pretokenizers[0].type",
                 "is " + quoted(first.value("type", json())) + ", not ByteLevel");
    }
    STRATA_RETURN_IF_ERROR(check_byte_level(first, "pre_tokenizer.pretokenizers[0]", true, err));
    return PretokenPattern::gpt2;
  }
  if (type_of(first) != "Split") {
    return err("pre_tokenizer.pretokenizers[0].type",
               "is " + quoted(first.value("type", json())) + ", not Split");
  }
  STRATA_ASSIGN_OR_RETURN(PretokenPattern pattern,
                          split_pattern(first, "pre_tokenizer.pretokenizers[0]", err));
  const json& second = (*list)[1];
  if (type_of(second) != "ByteLevel") {
    return err("pre_tokenizer.pretokenizers[1].type",
               "is " + quoted(second.value("type", json())) + ", not ByteLevel");
  }
  STRATA_RETURN_IF_ERROR(check_byte_level(second, "pre_tokenizer.pretokenizers[1]", false, err));
  return pattern;
}

// A merge as its two token strings.
Result<std::pair<std::string, std::string>> merge_parts(const json& m, size_t i,
                                                        const Errors& err) {
  const std::string field = "model.merges[" + std::to_string(i) + "]";
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    const size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
      return err(field, quoted(m) + " is not two tokens separated by one space");
    }
    return std::make_pair(s.substr(0, space), s.substr(space + 1));
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    return std::make_pair(m[0].get<std::string>(), m[1].get<std::string>());
  }
  return err(field, quoted(m) + " is neither \"a b\" nor [\"a\", \"b\"]");
}

}  // namespace

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::load(const std::string& path,
                                                         const TokenizerOptions& options) {
  STRATA_ASSIGN_OR_RETURN(std::string text, read_whole_file(path, "tokenizer"));
  return from_json(text, path, options);
}

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::from_json(std::string_view json_text,
                                                              const std::string& path,
                                                              const TokenizerOptions& options) {
  const Errors err{path};
  STRATA_ASSIGN_OR_RETURN(
      json root, parse_json(json_text, "tokenizer " + path, JsonSyntax{.unique_keys = true}));
  if (!root.is_object()) return bad_format("tokenizer " + path + " is not a JSON object");
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  t->path_ = path;
  t->special_tokens_ = options.special_tokens;

  auto normalizer = root.find("normalizer");
  if (normalizer != root.end() && !normalizer->is_null()) {
    return err("normalizer", "is " + quoted(*normalizer) + ": only null is supported");
  }
  STRATA_ASSIGN_OR_RETURN(t->pattern_, parse_pre_tokenizer(root, err));

  auto model_it = root.find("model");
  if (model_it == root.end() || !model_it->is_object()) return err("model", "is missing");
  const json& model = *model_it;
  if (model.contains("type") && model["type"] != "BPE") {
    return err("model.type", "is " + quoted(model["type"]) + ": only BPE is supported");
  }
  for (const char* key :
       {"byte_fallback", "continuing_subword_prefix", "end_of_word_suffix", "dropout"}) {
    STRATA_RETURN_IF_ERROR(must_be_off(model, key, "model", err));
  }
  STRATA_ASSIGN_OR_RETURN(t->ignore_merges_,
                          bool_field(model, "ignore_merges", false, "model", err));

  // The vocabulary, then the merges and added tokens that name its tokens.
  std::unordered_map<std::string, int32_t> id_of;          // token string -> id
  std::vector<std::pair<int32_t, std::string>> not_bytes;  // tokens outside the alphabet
  STRATA_RETURN_IF_ERROR(t->read_vocab(model, &id_of, &not_bytes));
  STRATA_RETURN_IF_ERROR(t->read_merges(model, id_of));
  STRATA_RETURN_IF_ERROR(t->read_added_tokens(root));
  for (const auto& [id, s] : not_bytes) {
    if (!t->present_[static_cast<size_t>(id)]) {
      return err("model.vocab[" + quoted(json(s)) + "]",
                 "has a character outside the byte-level alphabet and is not an added token");
    }
  }
  std::stable_sort(
      t->added_.begin(), t->added_.end(),
      [](const AddedToken& x, const AddedToken& y) { return x.content.size() > y.content.size(); });
  for (const AddedToken& a : t->added_) {
    t->added_first_byte_[static_cast<unsigned char>(a.content[0])] = true;
  }
  if (t->ignore_merges_) {
    t->ids_by_bytes_.reserve(id_of.size());
    for (const auto& [s, id] : id_of) {
      TokenBytes b = token_bytes(s);
      if (b.ok) t->ids_by_bytes_.emplace(std::move(b.bytes), id);
    }
  }
  return t;
}

// model.vocab: token string -> id, and id -> bytes.
Status BpeTokenizer::read_vocab(const json& model, std::unordered_map<std::string, int32_t>* id_of,
                                std::vector<std::pair<int32_t, std::string>>* not_bytes) {
  const Errors err{path_};
  auto vocab_it = model.find("vocab");
  if (vocab_it == model.end() || !vocab_it->is_object() || vocab_it->empty()) {
    return err("model.vocab", "must be a non-empty object {token: id}");
  }
  id_of->reserve(vocab_it->size());
  // Ids given to a token, in the byte alphabet or not: present_ marks only the former, and a
  // token outside it sharing an id would let a merge make a token that decodes to other bytes.
  std::vector<bool> taken;
  for (auto it = vocab_it->begin(); it != vocab_it->end(); ++it) {
    const json& v = it.value();
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxTokenId) {
      return err("model.vocab[" + quoted(json(it.key())) + "]",
                 "is " + quoted(v) + ", not an id in [0, " + std::to_string(kMaxTokenId) + "]");
    }
    const int32_t id = static_cast<int32_t>(v.get<int64_t>());
    if (static_cast<size_t>(id) >= tokens_.size()) {
      tokens_.resize(static_cast<size_t>(id) + 1);
      present_.resize(static_cast<size_t>(id) + 1);
      taken.resize(static_cast<size_t>(id) + 1);
    }
    if (taken[static_cast<size_t>(id)]) {
      return err("model.vocab[" + quoted(json(it.key())) + "]", "repeats id " + std::to_string(id));
    }
    taken[static_cast<size_t>(id)] = true;
    TokenBytes b = token_bytes(it.key());
    if (b.ok) {
      tokens_[static_cast<size_t>(id)] = std::move(b.bytes);
      present_[static_cast<size_t>(id)] = true;
    } else {
      not_bytes->emplace_back(id, it.key());
    }
    id_of->emplace(it.key(), id);
  }
  for (uint32_t b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(byte_to_unicode(static_cast<uint8_t>(b)), &s);
    auto it = id_of->find(s);
    if (it == id_of->end()) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      return err("model.vocab", std::string("has no token for byte ") + hex + " (" +
                                    quoted(json(s)) + "), which byte-level BPE needs");
    }
    byte_ids_[b] = it->second;
  }
  return Status::ok_status();
}

// model.merges, rank = position.
Status BpeTokenizer::read_merges(const json& model,
                                 const std::unordered_map<std::string, int32_t>& id_of) {
  const Errors err{path_};
  auto merges_it = model.find("merges");
  if (merges_it == model.end() || !merges_it->is_array()) {
    return err("model.merges", "must be an array");
  }
  merges_.reserve(merges_it->size());
  for (size_t i = 0; i < merges_it->size(); ++i) {
    STRATA_ASSIGN_OR_RETURN(auto parts, merge_parts((*merges_it)[i], i, err));
    const std::string field = "model.merges[" + std::to_string(i) + "]";
    auto a = id_of.find(parts.first);
    auto b = id_of.find(parts.second);
    auto ab = id_of.find(parts.first + parts.second);
    const std::string* unknown = a == id_of.end()    ? &parts.first
                                 : b == id_of.end()  ? &parts.second
                                 : ab == id_of.end() ? nullptr
                                                     : &parts.first;
    if (a == id_of.end() || b == id_of.end() || ab == id_of.end()) {
      const std::string name = unknown != nullptr ? *unknown : parts.first + parts.second;
      return err(field, quoted((*merges_it)[i]) + " names " + quoted(json(name)) +
                            ", which is not in model.vocab");
    }
    merges_[pair_key(a->second, b->second)] = Merge{static_cast<int32_t>(i), ab->second};
  }
  return Status::ok_status();
}

// added_tokens: ids of their own or of the vocab; their bytes are their content.
Status BpeTokenizer::read_added_tokens(const json& root) {
  const Errors err{path_};
  auto added_it = root.find("added_tokens");
  if (added_it != root.end() && !added_it->is_null()) {
    if (!added_it->is_array()) return err("added_tokens", "must be an array");
    for (size_t i = 0; i < added_it->size(); ++i) {
      const json& a = (*added_it)[i];
      const std::string field = "added_tokens[" + std::to_string(i) + "]";
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
          !a.contains("content") || !a["content"].is_string() ||
          a["content"].get_ref<const std::string&>().empty()) {
        return err(field, "must be {\"id\": N, \"content\": \"...\"} with non-empty content");
      }
      const int64_t id64 = a["id"].get<int64_t>();
      if (id64 < 0 || id64 > kMaxTokenId) {
        return err(field + ".id", "is " + std::to_string(id64) + ", not an id in [0, " +
                                      std::to_string(kMaxTokenId) + "]");
      }
      const int32_t id = static_cast<int32_t>(id64);
      const std::string content = a["content"].get<std::string>();
      if (static_cast<size_t>(id) >= tokens_.size()) {
        tokens_.resize(static_cast<size_t>(id) + 1);
        present_.resize(static_cast<size_t>(id) + 1);
      }
      std::string& slot = tokens_[static_cast<size_t>(id)];
      if (present_[static_cast<size_t>(id)] && slot != content) {
        return err(field, "gives id " + std::to_string(id) + " to " + quoted(json(content)) +
                              ", which model.vocab gives to another token");
      }
      slot = content;
      present_[static_cast<size_t>(id)] = true;
      added_.push_back({content, id});
    }
  }
  return Status::ok_status();
}

}  // namespace strata
