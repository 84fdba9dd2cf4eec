#include "primekv/util/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "primekv/util/text.h"

namespace primekv {

Result<std::string> ReadFileCapped(const std::string& path, std::string_view what,
                                   FileSource source, uint64_t max_bytes) {
  std::string quoted(1, '\'');  // appended, not "'" + ...: GCC 12 -Wrestrict false positive
  quoted += Printable(path, 200);
  quoted += '\'';
  const std::string name = std::string(what) + " " + quoted;
  // kRegular opens with O_NONBLOCK: opening a FIFO must not wait for a writer; the type check
  // follows. kStream blocks like any reader of a pipe.
  const int flags = O_RDONLY | O_CLOEXEC | (source == FileSource::kRegular ? O_NONBLOCK : 0);
  const int fd = ::open(path.c_str(), flags);
  auto cannot_read = [&](int err) {
    return Status::Error(std::string(what) + ": cannot read " + quoted + ": " + std::strerror(err));
  };
  if (fd < 0) return cannot_read(errno);
  struct stat st = {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode) ||
      (source == FileSource::kRegular && !S_ISREG(st.st_mode))) {
    ::close(fd);
    return Status::Error(name +
                         (S_ISDIR(st.st_mode) ? " is a directory" : " is not a regular file"));
  }
  auto too_large = [&] {
    return Status::Error(name + " is larger than " + std::to_string(max_bytes) + " bytes");
  };
  if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return too_large();
  }
  std::string text;
  if (S_ISREG(st.st_mode)) text.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return cannot_read(err);
    }
    if (n == 0) break;
    if (text.size() + static_cast<uint64_t>(n) > max_bytes) {
      ::close(fd);
      return too_large();
    }
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

Status FlushChecked(std::FILE* f, std::string_view what) {
  errno = 0;
  if (std::fflush(f) != 0 || std::ferror(f)) {
    const int err = errno;
    return Status::Error(std::string(what) +
                         ": write failed: " + (err != 0 ? std::strerror(err) : "I/O error"));
  }
  return Status::Ok();
}

Status FlushChecked(std::ostream& out, std::string_view what) {
  errno = 0;
  out.flush();
  if (!out.good()) {
    const int err = errno;
    return Status::Error(std::string(what) +
                         ": write failed: " + (err != 0 ? std::strerror(err) : "I/O error"));
  }
  return Status::Ok();
}

}  // namespace primekv
