// STRATA_CHECK: invariants whose failure means a bug in Strata, never bad user input.
// They stay on in release builds (unlike assert) and print file:line before aborting.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace strata::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* expr, const char* msg);
}  // namespace strata::detail

#define STRATA_CHECK(cond)                                                      \
  do {                                                                          \
    if (!(cond)) ::strata::detail::check_failed(__FILE__, __LINE__, #cond, ""); \
  } while (0)

#define STRATA_CHECK_MSG(cond, msg)                                                \
  do {                                                                             \
    if (!(cond)) ::strata::detail::check_failed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)
