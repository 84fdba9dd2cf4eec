// Reading untrusted input files with a size cap, and output whose errors are not lost.
#pragma once

#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>
#include <string_view>

#include "primekv/util/status.h"

namespace primekv {

// What ReadFileCapped takes besides regular files.
enum class FileSource {
  kRegular,  // nothing: a directory, FIFO or device is refused without blocking
  kStream,   // pipes, FIFOs and devices too, read to EOF (a directory is still refused)
};

// Default cap on one text input (prompt, context, task file, tokenizer, manifest): far above
// any context a model can read, far below what would exhaust memory.
inline constexpr uint64_t kMaxInputBytes = uint64_t{64} << 20;

// Reads a whole file of at most `max_bytes`. `what` names the file's role in messages
// ("--text-file", "manifest"): "WHAT 'PATH' is a directory", "... is not a regular file",
// "WHAT: cannot read 'PATH': why", "WHAT 'PATH' is larger than N bytes". Symlinks are followed;
// a loop is reported with its reason.
Result<std::string> ReadFileCapped(const std::string& path, std::string_view what,
                                   FileSource source = FileSource::kRegular,
                                   uint64_t max_bytes = kMaxInputBytes);

// Refuses an output path that exists and is not a regular file: a device, FIFO, directory or
// symbolic link ("WHAT 'PATH' is a FIFO, not a regular file; refusing to replace it"). Renaming
// a temporary over it would replace it (as root, /dev/null with a plain file), and writing into
// it would reach whatever it stands for or wait for a reader. A missing path is fine.
Status CheckReplaceableOutput(const std::string& path, std::string_view what);

// Writes `bytes` to `path` after CheckReplaceableOutput: into a fresh temporary beside it,
// synced to disk, then renamed over it, so no reader sees half a file and a failed write (a full
// disk) leaves the old file. Errors name WHAT and the path ("WHAT 'PATH': write failed: why"); the
// temporary is removed on any failure.
Status WriteFileReplacing(const std::string& path, std::string_view bytes, std::string_view what);

// Flushes and checks a stream that received output (stdout included): a full disk or a closed
// pipe becomes "WHAT: write failed: why" instead of a silent exit 0.
Status FlushChecked(std::FILE* f, std::string_view what);
Status FlushChecked(std::ostream& out, std::string_view what);

}  // namespace primekv
