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
