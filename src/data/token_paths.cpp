#include "data/token_paths.h"

#include <glob.h>

#include <algorithm>
#include <set>

#include "core/format.h"

namespace strata {

namespace {

bool is_pattern(const std::string& s) {
  return s.find_first_of("*?[") != std::string::npos;
}

// The matches of `pattern`, sorted; not_found naming `field` and it when there is none.
Result<std::vector<std::string>> glob_files(const std::string& pattern, const std::string& field) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> out;
  for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && out.empty())) {
    return not_found(field + ": no file matches '" + excerpt(pattern) + "'");
  }
  if (rc != 0) return io_error(field + ": cannot list the files of '" + pattern + "'");
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

Result<std::vector<std::string>> expand_token_paths(const std::string& spec,
                                                    const std::string& field) {
  std::vector<std::string> files;
  for (size_t start = 0; start <= spec.size();) {
    const size_t comma = std::min(spec.find(',', start), spec.size());
    const std::string element = spec.substr(start, comma - start);
    start = comma + 1;
    if (element.empty()) {
      return invalid_argument(field + " '" + excerpt(spec) +
                              "' has an empty element (a list is \"a.bin,b.bin\")");
    }
    if (!is_pattern(element)) {
      files.push_back(element);
      continue;
    }
    STRATA_ASSIGN_OR_RETURN(std::vector<std::string> matches, glob_files(element, field));
    files.insert(files.end(), matches.begin(), matches.end());
  }
  std::set<std::string> seen;
  for (const std::string& f : files) {
    if (!seen.insert(f).second) {
      return invalid_argument(field + " names " + f + " twice; a file is read once an epoch");
    }
  }
  return files;
}

}  // namespace strata
