// Strata's side of the tokenizer shell tests (tests/tokenizer_*.sh), whose references are other
// implementations (tools/tokenizer_reference.js, Python's sentencepiece and unicodedata):
//
//   tokenizer_check ids TOKENIZER TEXT OUT.json [--special-tokens] [--no-round-trip]
//                       [--whole-only]
//       {"whole": ids of the text, "lines": ids of each line (with its "\n"), unless
//       --whole-only}; unless --no-round-trip, exits 1 when decoding them does not give the
//       text back
//   tokenizer_check pretokens gpt2|llama3 TEXT OUT.json
//       the same for the pre-tokenizer's pieces (strings)
//   tokenizer_check classes OUT.txt
//       "first last L|N|S" (hex) for every run of code points of one class but "other"
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/file_util.h"
#include "data/pretokenize.h"
#include "data/tokenizer.h"
#include "data/unicode_classes.h"

namespace {

using nlohmann::json;
using namespace strata;

int usage() {
  std::fputs(
      "usage: tokenizer_check ids TOKENIZER TEXT OUT.json [--special-tokens] "
      "[--no-round-trip] [--whole-only]\n"
      "       tokenizer_check pretokens gpt2|llama3 TEXT OUT.json\n"
      "       tokenizer_check classes OUT.txt\n",
      stderr);
  return 2;
}

int fail(const std::string& m) {
  std::fprintf(stderr, "tokenizer_check: %s\n", m.c_str());
  return 1;
}

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  for (size_t i = 0; i < text.size();) {
    const size_t nl = text.find('\n', i);
    const size_t end = nl == std::string_view::npos ? text.size() : nl + 1;
    lines.push_back(text.substr(i, end - i));
    i = end;
  }
  return lines;
}

bool write_json(const std::string& path, const json& j) {
  std::ofstream out(path);
  out << j.dump(-1, ' ', false, json::error_handler_t::strict);
  return static_cast<bool>(out);
}

int ids(const std::vector<std::string>& args) {
  if (args.size() < 3) return usage();
  TokenizerOptions o;
  bool round_trip = true, lines = true;
  for (size_t i = 3; i < args.size(); ++i) {
    if (args[i] == "--special-tokens") {
      o.special_tokens = true;
    } else if (args[i] == "--no-round-trip") {
      round_trip = false;
    } else if (args[i] == "--whole-only") {
      lines = false;
    } else {
      return usage();
    }
  }
  auto tok = load_tokenizer(args[0], o);
  if (!tok.ok()) return fail(tok.status().message());
  auto text = read_whole_file(args[1], "text file");
  if (!text.ok()) return fail(text.status().message());
  json out = {{"whole", json::array()}};
  if (lines) out["lines"] = json::array();
  std::vector<std::string_view> pieces = {*text};
  if (lines) {
    for (std::string_view line : lines_of(*text)) pieces.push_back(line);
  }
  for (size_t k = 0; k < pieces.size(); ++k) {
    auto r = (*tok)->encode(pieces[k]);
    if (!r.ok()) return fail(r.status().message());
    if (round_trip) {
      auto back = (*tok)->decode(*r);
      if (!back.ok()) return fail(back.status().message());
      if (*back != pieces[k]) {
        size_t at = 0;
        while (at < back->size() && at < pieces[k].size() && (*back)[at] == pieces[k][at]) ++at;
        return fail((k == 0 ? "the whole text" : "line " + std::to_string(k)) +
                    " does not decode back to itself: they differ from byte " + std::to_string(at));
      }
    }
    if (k == 0) {
      out["whole"] = *r;
    } else {
      out["lines"].push_back(*r);
    }
  }
  return write_json(args[2], out) ? 0 : fail("cannot write " + args[2]);
}

int pretokens(const std::vector<std::string>& args) {
  if (args.size() != 3) return usage();
  PretokenPattern p;
  if (args[0] == "gpt2") {
    p = PretokenPattern::gpt2;
  } else if (args[0] == "llama3") {
    p = PretokenPattern::llama3;
  } else {
    return usage();
  }
  auto text = read_whole_file(args[1], "text file");
  if (!text.ok()) return fail(text.status().message());
  const auto split = [&](std::string_view t) {
    std::vector<std::string_view> v;
    pretokenize(t, p, &v);
    json a = json::array();
    for (std::string_view s : v) a.push_back(std::string(s));
    return a;
  };
  json out = {{"whole", split(*text)}, {"lines", json::array()}};
  for (std::string_view line : lines_of(*text)) out["lines"].push_back(split(line));
  return write_json(args[2], out) ? 0 : fail("cannot write " + args[2]);
}

int classes(const std::vector<std::string>& args) {
  if (args.size() != 1) return usage();
  std::FILE* f = std::fopen(args[0].c_str(), "w");
  if (f == nullptr) return fail("cannot write " + args[0]);
  const char* names = "?LNS";
  uint32_t start = 0;
  CharClass run = char_class(0);
  for (uint32_t cp = 1; cp <= 0x110000; ++cp) {
    const CharClass c = cp < 0x110000 ? char_class(cp) : CharClass::other;
    if (cp < 0x110000 && c == run) continue;
    if (run != CharClass::other) {
      std::fprintf(f, "%X %X %c\n", start, cp - 1, names[static_cast<int>(run)]);
    }
    start = cp;
    run = c;
  }
  return std::fclose(f) == 0 ? 0 : fail("cannot write " + args[0]);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string cmd = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "ids") return ids(args);
  if (cmd == "pretokens") return pretokens(args);
  if (cmd == "classes") return classes(args);
  return usage();
}
