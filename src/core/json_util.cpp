// Note [Bounded JSON nesting] in json_util.h.
#include "core/json_util.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/format.h"

namespace strata {

namespace {

using json = nlohmann::json;

// Reasons quote the offending token, which may be as long as the file.
constexpr size_t kMaxReasonChars = 120;

std::string cut(std::string s, size_t max_chars) {
  if (s.size() > max_chars) s = s.substr(0, max_chars) + "...";
  return s;
}

// Line and column (both from 1) of byte offset `pos`.
std::string position_text(std::string_view text, size_t pos) {
  pos = std::min(pos, text.size());
  int64_t line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < pos; i++) {
    if (text[i] == '\n') {
      line++;
      line_start = i + 1;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(pos - line_start + 1);
}

// Appends v's compact text to out until out exceeds `max`; `levels` more levels of arrays and
// objects are opened, deeper ones are shown as [...] and {...}.
template <typename Json>
void preview_into(const Json& v, std::string& out, size_t max, int levels) {
  if (out.size() > max) return;
  if (v.is_string()) {
    // Only the start of a long string is dumped (with its quotes and escapes).
    const std::string& s = v.template get_ref<const std::string&>();
    out += Json(s.substr(0, max - out.size() + 1))
               .dump(-1, ' ', false, Json::error_handler_t::replace);
    return;
  }
  if (!v.is_structured()) {
    out += v.dump(-1, ' ', false, Json::error_handler_t::replace);
    return;
  }
  const bool object = v.is_object();
  if (levels == 0 && !v.empty()) {
    out += object ? "{...}" : "[...]";
    return;
  }
  out += object ? '{' : '[';
  bool first = true;
  for (auto it = v.begin(); it != v.end() && out.size() <= max; ++it) {
    if (!first) out += ',';
    first = false;
    if (object) {
      out += Json(it.key().substr(0, max)).dump(-1, ' ', false, Json::error_handler_t::replace);
      out += ':';
    }
    preview_into(*it, out, max, levels - 1);
  }
  out += object ? '}' : ']';
}

}  // namespace

Status check_json_text(std::string_view text, const std::string& what, JsonSyntax syntax) {
  int64_t depth = 0;
  const size_t n = text.size();
  for (size_t i = 0; i < n; i++) {
    const char c = text[i];
    if (c == '"') {  // a string: skip to its closing quote, past escaped characters
      for (i++; i < n && text[i] != '"'; i++) {
        if (text[i] == '\\') i++;
      }
    } else if (syntax.comments && c == '/' && i + 1 < n && text[i + 1] == '/') {
      while (i < n && text[i] != '\n') i++;
    } else if (syntax.comments && c == '/' && i + 1 < n && text[i + 1] == '*') {
      const size_t end = text.find("*/", i + 2);
      i = end == std::string_view::npos ? n : end + 1;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        return bad_format(what + " is not valid JSON: " + position_text(text, i) +
                          ": arrays and objects nest deeper than " + std::to_string(kMaxJsonDepth) +
                          " levels");
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      depth--;  // a stray bracket is the parser's to report
    }
  }
  return Status::ok_status();
}

Status check_json_depth(const json& v, const std::string& what) {
  std::vector<std::pair<const json*, int64_t>> stack = {{&v, 0}};
  while (!stack.empty()) {
    auto [value, depth] = stack.back();
    stack.pop_back();
    if (!value->is_structured()) continue;
    if (depth + 1 > kMaxJsonDepth) {
      return invalid_argument(what + " nests JSON deeper than " + std::to_string(kMaxJsonDepth) +
                              " levels");
    }
    for (const json& child : *value) stack.emplace_back(&child, depth + 1);
  }
  return Status::ok_status();
}

std::string json_preview(const json& v, size_t max_chars) {
  std::string out;
  preview_into(v, out, max_chars, /*levels=*/4);
  return cut(std::move(out), max_chars);
}

std::string json_preview(const nlohmann::ordered_json& v, size_t max_chars) {
  std::string out;
  preview_into(v, out, max_chars, /*levels=*/4);
  return cut(std::move(out), max_chars);
}

namespace detail {

std::string KeyTracker::child_name() const {
  if (stack_.empty()) return "";
  const Frame& f = stack_.back();
  if (!f.object) return f.name + "[" + std::to_string(f.index) + "]";
  return f.name.empty() ? f.current : f.name + "." + f.current;
}

void KeyTracker::open(bool object) {
  Frame f;
  f.object = object;
  f.name = child_name();
  stack_.push_back(std::move(f));
}

void KeyTracker::close() {
  if (!stack_.empty()) stack_.pop_back();
  value();  // the closed object or array was its parent's element
}

void KeyTracker::key(const std::string& k) {
  if (stack_.empty()) return;
  Frame& f = stack_.back();
  // Shown, not compared: bounded, so 64 levels under a 100 MB key hold 64 short names, not 6 GB.
  f.current = excerpt(k);
  if (!f.keys.insert(k).second && duplicate_.empty()) duplicate_ = child_name();
}

void KeyTracker::value() {
  if (!stack_.empty() && !stack_.back().object) stack_.back().index++;
}

Status duplicate_key_error(const std::string& what, const std::string& key) {
  return bad_format(what + ": duplicate key \"" + key +
                    "\" (each key may appear once in an object: remove one)");
}

Status json_parse_failure(std::string_view text, const std::string& what, size_t byte,
                          const char* what_arg) {
  // what() is "[json.exception.parse_error.101] parse error at line 4, column 0: <reason>" or
  // "[json.exception.out_of_range.406] <reason>". The position is recomputed from the byte
  // offset: nlohmann counts the newline it has just read as the start of the next line ("line 4,
  // column 0" for an error at the end of line 3).
  std::string reason = what_arg;
  if (const size_t at = reason.find("parse error at "); at != std::string::npos) {
    if (const size_t colon = reason.find(": ", at); colon != std::string::npos) {
      reason = reason.substr(colon + 2);
    }
  } else if (reason.rfind("[json.exception.", 0) == 0) {
    if (const size_t tag_end = reason.find("] "); tag_end != std::string::npos) {
      reason = reason.substr(tag_end + 2);
    }
  }
  reason = cut(printable(reason), kMaxReasonChars);
  std::string where = byte > 0 ? position_text(text, byte - 1) + ": " : std::string();
  return bad_format(what + " is not valid JSON: " + where + reason);
}

}  // namespace detail

}  // namespace strata
