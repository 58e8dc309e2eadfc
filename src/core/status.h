// Status and Result<T>: recoverable errors (bad config, bad file, full disk, budget too small).
// Invariants that only a bug can break use STRATA_CHECK (check.h) instead.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace strata {

enum class ErrorCode {
  ok = 0,
  invalid_argument,  // a value the user gave is wrong (config field, flag)
  not_found,         // a file or key that should exist does not
  bad_format,        // a file exists but its contents are malformed
  io_error,          // an I/O call failed (errno in the message)
  out_of_memory,     // a memory tier's budget or the allocator said no
  no_space,          // storage is full
  unavailable,       // a feature is not available here (e.g. torch not installed)
  internal,          // should not happen; reported instead of crashing where possible
};

const char* error_code_name(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == ErrorCode::ok; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "bad_format: data file x.bin: magic 12 is not 20240520"
  std::string to_string() const;

 private:
  ErrorCode code_ = ErrorCode::ok;
  std::string message_;
};

// The factories: invalid_argument("...") is Status(ErrorCode::invalid_argument, "..."), and so on
// for every code but ok (Status()) and no_space (errno_error below).
template <ErrorCode kCode>
struct StatusFactory {
  Status operator()(std::string message) const { return {kCode, std::move(message)}; }
};
inline constexpr StatusFactory<ErrorCode::invalid_argument> invalid_argument{};
inline constexpr StatusFactory<ErrorCode::not_found> not_found{};
inline constexpr StatusFactory<ErrorCode::bad_format> bad_format{};
inline constexpr StatusFactory<ErrorCode::io_error> io_error{};
inline constexpr StatusFactory<ErrorCode::out_of_memory> out_of_memory{};
inline constexpr StatusFactory<ErrorCode::unavailable> unavailable{};
inline constexpr StatusFactory<ErrorCode::internal> internal_error{};

// "Bad file descriptor (errno 9)"; thread safe.
std::string errno_text(int err);
// A failed call's errno as a Status, "<context>: <errno_text>": no_space for ENOSPC and EDQUOT
// (the CLI's "disk full", exit code 2), io_error otherwise. The one place that maps an errno.
Status errno_error(const std::string& context, int err);

// Either a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Status status) : v_(std::move(status)) {}

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status ok_status;
    return ok() ? ok_status : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  T& operator*() { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace strata

// Propagate a non-ok Status to the caller.
#define STRATA_RETURN_IF_ERROR(expr)       \
  do {                                     \
    ::strata::Status strata_s_ = (expr);   \
    if (!strata_s_.ok()) return strata_s_; \
  } while (0)

#define STRATA_CONCAT_INNER(a, b) a##b
#define STRATA_CONCAT(a, b) STRATA_CONCAT_INNER(a, b)
// auto x = ...Result<T>...; or return its Status.
#define STRATA_ASSIGN_OR_RETURN(lhs, expr)              \
  auto STRATA_CONCAT(strata_r_, __LINE__) = (expr);     \
  if (!STRATA_CONCAT(strata_r_, __LINE__).ok())         \
    return STRATA_CONCAT(strata_r_, __LINE__).status(); \
  lhs = std::move(STRATA_CONCAT(strata_r_, __LINE__)).value()
