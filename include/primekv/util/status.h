// Error handling for expected failures (bad files, bad input): Status and Result<T>.
// Programmer errors use Check() instead; nothing here throws.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace primekv {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message)); }

  bool ok() const { return !message_.has_value(); }
  // Empty for an OK status.
  const std::string& message() const {
    static const std::string kEmpty;
    return message_ ? *message_ : kEmpty;
  }

 private:
  explicit Status(std::string message) : message_(std::move(message)) {}
  std::optional<std::string> message_;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : data_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(data_).ok())
      data_ = Status::Error("internal: Result built from OK status");
  }

  bool ok() const { return std::holds_alternative<T>(data_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(data_); }
  const std::string& message() const { return std::get<Status>(data_).message(); }

  T& value() & { return std::get<T>(data_); }
  const T& value() const& { return std::get<T>(data_); }
  T&& value() && { return std::get<T>(std::move(data_)); }
  T* operator->() { return &std::get<T>(data_); }
  const T* operator->() const { return &std::get<T>(data_); }
  T& operator*() & { return std::get<T>(data_); }
  const T& operator*() const& { return std::get<T>(data_); }

 private:
  std::variant<T, Status> data_;
};

inline Status ToStatus(const Status& s) { return s; }
template <typename T>
Status ToStatus(const Result<T>& r) {
  return r.status();
}

// Programmer-error check: prints where and why, then aborts. Not for input validation.
// (__builtin_FILE/LINE rather than std::source_location, which clang 14 lacks with libstdc++.)
inline void Check(bool condition, const char* what, const char* file = __builtin_FILE(),
                  unsigned line = __builtin_LINE()) {
  if (!condition) {
    std::fprintf(stderr, "primekv: internal check failed at %s:%u: %s\n", file, line, what);
    std::abort();
  }
}

}  // namespace primekv

// Early return on failure. These are macros because only a macro can return from the
// caller; everything else about them is ordinary code.
//   PRIMEKV_RETURN_IF_ERROR(WriteHeader(out));            // a Status or any Result<T>
//   PRIMEKV_ASSIGN_OR_RETURN(auto layers, ReadInt(f, k));  // declares `layers` as T
#define PRIMEKV_STATUS_CONCAT_INNER(a, b) a##b
#define PRIMEKV_STATUS_CONCAT(a, b) PRIMEKV_STATUS_CONCAT_INNER(a, b)
#define PRIMEKV_RETURN_IF_ERROR(expr)                                      \
  do {                                                                     \
    auto primekv_status_ = (expr);                                         \
    if (!primekv_status_.ok()) return ::primekv::ToStatus(primekv_status_); \
  } while (false)
#define PRIMEKV_ASSIGN_OR_RETURN(lhs, expr) \
  PRIMEKV_ASSIGN_OR_RETURN_IMPL(PRIMEKV_STATUS_CONCAT(primekv_result_, __COUNTER__), lhs, expr)
#define PRIMEKV_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)   \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return ::primekv::ToStatus(tmp);       \
  lhs = std::move(tmp).value()
