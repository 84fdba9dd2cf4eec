#include "primekv/util/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
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

namespace {

std::string Quoted(const std::string& path) {
  std::string quoted(1, '\'');  // appended, not "'" + ...: GCC 12 -Wrestrict false positive
  quoted += Printable(path, 200);
  quoted += '\'';
  return quoted;
}

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

Status WriteAllTo(int fd, std::string_view bytes, const std::string& name) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Status::Error(name +
                           ": write failed: " + (n < 0 ? std::strerror(errno) : "no progress"));
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

}  // namespace

Status CheckReplaceableOutput(const std::string& path, std::string_view what) {
  if (path.empty()) return Status::Error(std::string(what) + ": the output path is empty");
  struct stat st = {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return Status::Error(std::string(what) + ": cannot check " + Quoted(path) + ": " +
                         std::strerror(errno));
  }
  if (S_ISREG(st.st_mode)) return Status::Ok();
  return Status::Error(std::string(what) + " " + Quoted(path) + " is " + KindOf(st.st_mode) +
                       ", not a regular file; refusing to replace it");
}

Status WriteFileReplacing(const std::string& path, std::string_view bytes, std::string_view what) {
  PRIMEKV_RETURN_IF_ERROR(CheckReplaceableOutput(path, what));
  const std::string name = std::string(what) + " " + Quoted(path);
  std::string tmp = path + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    return Status::Error(name +
                         ": cannot create a temporary file beside it: " + std::strerror(errno));
  }
  ::fchmod(fd, 0644);
  Status st = WriteAllTo(fd, bytes, name);
  // Without fsync the rename can reach the disk before the data: after a crash the final name
  // would hold an empty file. Some filesystems also report a full disk only here.
  if (st.ok() && ::fsync(fd) != 0)
    st = Status::Error(name + ": write failed: " + std::strerror(errno));
  if (::close(fd) != 0 && st.ok())
    st = Status::Error(name + ": write failed: " + std::strerror(errno));
  // A rename replaces the path itself, never what a link points to; a link or device put there
  // between the check and here would still be replaced (the check is not atomic with it).
  if (st.ok() && std::rename(tmp.c_str(), path.c_str()) != 0)
    st = Status::Error(name + ": cannot replace it: " + std::strerror(errno));
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
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
