#include "core/status.h"

#include <cerrno>
#include <cstring>

namespace strata {

std::string errno_text(int err) {
  char buf[128];
  // GNU strerror_r: thread safe, returns a pointer to the text (not always into buf).
  const char* text = strerror_r(err, buf, sizeof buf);
  return std::string(text) + " (errno " + std::to_string(err) + ")";
}

Status errno_error(const std::string& context, int err) {
  std::string message = context + ": " + errno_text(err);
  if (err == ENOSPC || err == EDQUOT) return {ErrorCode::no_space, std::move(message)};
  return io_error(std::move(message));
}

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::ok:
      return "ok";
    case ErrorCode::invalid_argument:
      return "invalid_argument";
    case ErrorCode::not_found:
      return "not_found";
    case ErrorCode::bad_format:
      return "bad_format";
    case ErrorCode::io_error:
      return "io_error";
    case ErrorCode::out_of_memory:
      return "out_of_memory";
    case ErrorCode::no_space:
      return "no_space";
    case ErrorCode::unavailable:
      return "unavailable";
    case ErrorCode::internal:
      return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(error_code_name(code_)) + ": " + message_;
}

}  // namespace strata
