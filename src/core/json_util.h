// Reading JSON that a user or a file supplied: the one parser entry point, with a nesting limit,
// and a bounded preview of a value for error messages.
//
// Note [Bounded JSON nesting]
// nlohmann's parser builds a document with an explicit stack and destroys one iteratively, but
// copying, comparing and dumping a value recurse once per level of nesting. A file of 200,000
// nested arrays (a config, a safetensors header, trainer_state.json) therefore parses, then
// overflows the stack (SIGSEGV) the first time the value is copied or printed, e.g. in an error
// message. So every JSON text Strata reads goes through parse_json, which refuses nesting deeper
// than kMaxJsonDepth *before* the parser runs, by a linear scan that counts brackets outside
// strings (and comments, where they are allowed); after it no walk can recurse deeper than that.
// Strata's own files nest 3 levels. Values that reach Strata already parsed (a caller's json)
// can be checked with check_json_depth, an iterative walk. Error messages show JSON values only
// through json_preview, which reads no more of a value than it prints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace strata {

inline constexpr int64_t kMaxJsonDepth = 64;

struct JsonSyntax {
  bool comments = false;  // allow // and /* */ comments (configs are annotated by hand)
  // Refuse an object with a key twice (Note [Duplicate keys]).
  bool unique_keys = false;
};

// bad_format "<what> is not valid JSON: line L, column C: <reason>" when the text is malformed or
// nests arrays and objects deeper than kMaxJsonDepth (the position of the first bracket too deep).
Status check_json_text(std::string_view text, const std::string& what, JsonSyntax syntax = {});

// Parses `text` as Json (nlohmann::json or nlohmann::ordered_json) after check_json_text's
// nesting check; errors as check_json_text's, and with syntax.unique_keys bad_format
// "<what>: duplicate key \"train.steps\" ..." naming the first key found twice. Never throws.
template <typename Json = nlohmann::json>
Result<Json> parse_json(std::string_view text, const std::string& what, JsonSyntax syntax = {});

// invalid_argument "<what> nests JSON deeper than 64 levels" for a value deeper than
// kMaxJsonDepth (a scalar is depth 0, [] and {} depth 1). Iterative, so any depth is safe.
Status check_json_depth(const nlohmann::json& v, const std::string& what);

// v as compact JSON text, cut to about max_chars with "..." when longer. Reads only what it
// prints (at most a few levels deep), so it is safe for any value; invalid UTF-8 is replaced.
std::string json_preview(const nlohmann::json& v, size_t max_chars = 60);
std::string json_preview(const nlohmann::ordered_json& v, size_t max_chars = 60);

namespace detail {

// Note [Duplicate keys]
// nlohmann keeps the last of an object's keys given twice, so {"train": {"steps": 10, "steps":
// 1000}} would train 1000 steps with no word: a hand-edited config whose second copy of a key
// is forgotten. parse_json with unique_keys follows the parser's events (objects and arrays
// opened and closed, keys, values) in a KeyTracker, which keeps each open object's keys and
// names the first key seen twice by its path from the top ("train.steps", "a[2].b").
class KeyTracker {
 public:
  void open(bool object);  // '{' or '['
  void close();            // '}' or ']'
  void key(const std::string& k);
  void value();  // a scalar
  const std::string& duplicate() const { return duplicate_; }

 private:
  struct Frame {
    bool object = false;
    std::set<std::string> keys;
    std::string name;     // its path from the top
    std::string current;  // an object's key being read, as excerpt shows it
    int64_t index = 0;    // an array's element being read
  };
  std::string child_name() const;
  std::vector<Frame> stack_;
  std::string duplicate_;
};

// bad_format "<what>: duplicate key \"<path>\" ...", the path as KeyTracker names it.
Status duplicate_key_error(const std::string& what, const std::string& path);

// The one-line error for an exception of nlohmann's parser: "<what> is not valid JSON: line L,
// column C: <reason>" for a parse error at byte offset `byte` (nlohmann's e.byte; 0: unknown,
// as for a number too large for a double, which nlohmann reports as out_of_range).
Status json_parse_failure(std::string_view text, const std::string& what, size_t byte,
                          const char* what_arg);
}  // namespace detail

template <typename Json>
Result<Json> parse_json(std::string_view text, const std::string& what, JsonSyntax syntax) {
  STRATA_RETURN_IF_ERROR(check_json_text(text, what, syntax));
  try {
    if (!syntax.unique_keys) {
      return Json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/true, syntax.comments);
    }
    detail::KeyTracker keys;
    using Event = typename Json::parse_event_t;
    auto track = [&keys](int, Event e, Json& parsed) {
      if (e == Event::object_start || e == Event::array_start) keys.open(e == Event::object_start);
      if (e == Event::object_end || e == Event::array_end) keys.close();
      if (e == Event::key) keys.key(parsed.template get_ref<const std::string&>());
      if (e == Event::value) keys.value();
      return true;
    };
    Json parsed = Json::parse(text, track, /*allow_exceptions=*/true, syntax.comments);
    if (!keys.duplicate().empty()) return detail::duplicate_key_error(what, keys.duplicate());
    return parsed;
  } catch (const typename Json::parse_error& e) {
    return detail::json_parse_failure(text, what, e.byte, e.what());
  } catch (const typename Json::exception& e) {
    return detail::json_parse_failure(text, what, 0, e.what());
  }
}

}  // namespace strata
