#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "gguf/layout.h"
#include "primekv/gguf/gguf.h"

namespace primekv {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader assumes a little-endian host");

namespace {

using gguf_internal::CheckedAdd;
using gguf_internal::CheckedMul;
using gguf_internal::IsInteger;
using gguf_internal::ValueKind;
using gguf_internal::ValueType;
using gguf_internal::ValueTypeInfo;

// Owns a read-only mapping of a whole file.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* addr, size_t size) : addr_(addr), size_(size) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (addr_ != nullptr) ::munmap(addr_, size_);
  }
  std::span<const uint8_t> bytes() const { return {static_cast<const uint8_t*>(addr_), size_}; }

 private:
  void* addr_ = nullptr;
  size_t size_ = 0;
};

class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  ~FdCloser() { ::close(fd_); }

 private:
  int fd_;
};

std::string ErrnoMessage(int err) { return std::system_category().message(err); }

std::string Quote(std::string_view s) {
  // Names come from untrusted bytes: keep messages printable ASCII (terminals interpret some
  // bytes >= 0x80 as controls) and short.
  constexpr size_t kMaxShown = 80;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (s.size() > kMaxShown) out += "...";
  out += "'";
  return out;
}

bool IsKnownValueType(uint32_t t) { return ValueType(static_cast<GgufType>(t)) != nullptr; }

// Fewest bytes one value of type `t` can occupy in a file.
uint64_t MinValueBytes(GgufType t) { return static_cast<uint64_t>(ValueType(t)->bytes); }

std::optional<int64_t> AsInt(const GgufValue& v) {
  if (!IsInteger(v.type)) return std::nullopt;
  if (ValueType(v.type)->kind == ValueKind::kUnsigned) {
    if (v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(v.u);
  }
  return v.i;
}

// Reads the header, metadata and tensor infos from `bytes`, checking every count, size and offset
// against what remains. Error messages start with the display name.
class Parser {
 public:
  Parser(std::span<const uint8_t> bytes, const std::string& name) : bytes_(bytes), name_(name) {}

  Status Error(const std::string& message) const { return Status::Error(name_ + ": " + message); }

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  // `what` is a callable returning a description; it only runs when there is an error.
  template <typename What>
  Status Need(uint64_t n, const What& what) const {
    if (n <= remaining()) return Status::Ok();
    return Error("file truncated: " + what() + " at offset " + std::to_string(pos_) + " needs " +
                 std::to_string(n) + " bytes but only " + std::to_string(remaining()) +
                 " remain (file is " + std::to_string(bytes_.size()) + " bytes)");
  }

  template <typename T, typename What>
  Status Read(T* out, const What& what) {
    if (Status s = Need(sizeof(T), what); !s.ok()) return s;
    std::memcpy(out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }

  template <typename What>
  Status ReadString(std::string* out, const What& what) {
    uint64_t length = 0;
    if (Status s = Read(&length, [&] { return "length of " + what(); }); !s.ok()) return s;
    if (length > kGgufMaxStringLength) {
      return Error("string length " + std::to_string(length) + " of " + what() +
                   " exceeds the limit of " + std::to_string(kGgufMaxStringLength) + " bytes");
    }
    if (length > remaining()) {
      return Error("string of " + std::to_string(length) + " bytes for " + what() + " at offset " +
                   std::to_string(pos_) + " runs past end of file (" + std::to_string(remaining()) +
                   " bytes remain)");
    }
    out->assign(reinterpret_cast<const char*>(bytes_.data() + pos_), length);
    pos_ += length;
    return Status::Ok();
  }

  Status ReadValue(GgufType type, int depth, std::string_view key, GgufValue* out) {
    out->type = type;
    const auto what = [&] { return "value of " + Quote(key); };
    const ValueTypeInfo* info = ValueType(type);
    if (info == nullptr) {
      return Error("unknown value type " + std::to_string(static_cast<uint32_t>(type)) + " for " +
                   Quote(key));
    }
    switch (info->kind) {
      case ValueKind::kUnsigned:
      case ValueKind::kSigned:
        return ReadInteger(info->bytes, info->kind == ValueKind::kSigned, what, out);
      case ValueKind::kFloat:
        return info->bytes == 4 ? ReadFloat32(what, out) : Read(&out->f, what);
      case ValueKind::kBool:
        return ReadBool(key, out);
      case ValueKind::kString:
        return ReadString(&out->s, what);
      case ValueKind::kArray:
        return ReadArray(depth, key, out);
    }
    return Status::Ok();
  }

 private:
  // An integer of `bytes` little-endian bytes into out->u, or sign-extended into out->i.
  template <typename What>
  Status ReadInteger(int bytes, bool is_signed, const What& what, GgufValue* out) {
    if (Status s = Need(static_cast<uint64_t>(bytes), what); !s.ok()) return s;
    uint64_t v = 0;
    std::memcpy(&v, bytes_.data() + pos_, static_cast<size_t>(bytes));
    pos_ += static_cast<uint64_t>(bytes);
    if (is_signed) {
      const int shift = 64 - 8 * bytes;
      out->i = static_cast<int64_t>(v << shift) >> shift;
    } else {
      out->u = v;
    }
    return Status::Ok();
  }

  template <typename What>
  Status ReadFloat32(const What& what, GgufValue* out) {
    float f = 0;
    if (Status s = Read(&f, what); !s.ok()) return s;
    out->f = f;
    return Status::Ok();
  }

  Status ReadBool(std::string_view key, GgufValue* out) {
    uint8_t b = 0;
    if (Status s = Read(&b, [&] { return "value of " + Quote(key); }); !s.ok()) return s;
    if (b > 1) {
      return Error("invalid bool value " + std::to_string(b) + " in " + Quote(key) + " at offset " +
                   std::to_string(pos_ - 1));
    }
    out->u = b;
    return Status::Ok();
  }

  Status ReadArray(int depth, std::string_view key, GgufValue* out) {
    if (depth >= kGgufMaxArrayDepth) {
      return Error("arrays nested deeper than " + std::to_string(kGgufMaxArrayDepth) +
                   " levels in " + Quote(key));
    }
    uint32_t element_type = 0;
    if (Status s = Read(&element_type, [&] { return "array element type of " + Quote(key); });
        !s.ok()) {
      return s;
    }
    if (!IsKnownValueType(element_type)) {
      return Error("unknown value type " + std::to_string(element_type) +
                   " for array elements of " + Quote(key));
    }
    out->array_type = static_cast<GgufType>(element_type);
    uint64_t count = 0;
    if (Status s = Read(&count, [&] { return "array count of " + Quote(key); }); !s.ok()) {
      return s;
    }
    // Checked before allocating: a huge count fails here instead of exhausting memory.
    const uint64_t min_bytes = MinValueBytes(out->array_type);
    if (count > remaining() / min_bytes) {
      return Error("array count " + std::to_string(count) + " of " + Quote(key) + " (" +
                   std::string(GgufTypeName(out->array_type)) + " elements) cannot fit in the " +
                   std::to_string(remaining()) + " bytes that remain at offset " +
                   std::to_string(pos_));
    }
    // Each element costs a GgufValue (about 88 bytes) however small it is in the file, so the
    // total is bounded too: a 25 MB file of one u8 array must not take 2 GB.
    if (count > elements_left_) {
      return Error("metadata arrays hold more than " + std::to_string(kGgufMaxMetadataElements) +
                   " elements in total (array " + Quote(key) + " has " + std::to_string(count) +
                   "; the largest real vocabularies need under 1,000,000)");
    }
    elements_left_ -= count;
    out->array.resize(count);
    for (GgufValue& element : out->array) {
      if (Status s = ReadValue(out->array_type, depth + 1, key, &element); !s.ok()) return s;
    }
    return Status::Ok();
  }

  std::span<const uint8_t> bytes_;
  uint64_t elements_left_ = kGgufMaxMetadataElements;
  const std::string& name_;
  uint64_t pos_ = 0;
};

}  // namespace

struct GgufFile::Impl {
  std::string display_name;
  Mapping mapping;  // empty for FromMemory
  std::span<const uint8_t> bytes;
  uint32_t version = 0;
  uint64_t alignment = kGgufDefaultAlignment;
  uint64_t data_offset = 0;
  std::vector<GgufKv> metadata;
  std::vector<GgufTensorInfo> tensors;
  std::map<std::string, size_t, std::less<>> kv_index;
  std::map<std::string, size_t, std::less<>> tensor_index;

  Impl(std::string name, std::span<const uint8_t> data)
      : display_name(std::move(name)), bytes(data) {}
  Impl(std::string name, void* addr, size_t size)
      : display_name(std::move(name)), mapping(addr, size), bytes(mapping.bytes()) {}

  Status Parse();

 private:
  Status ParseHeader(Parser& p, uint64_t* n_tensors, uint64_t* n_kv);
  Status ParseMetadata(Parser& p, uint64_t n_kv);
  Status ParseTensorInfos(Parser& p, uint64_t n_tensors);
  Status CheckTensorRanges(const Parser& p);
};

Status GgufFile::Impl::ParseHeader(Parser& p, uint64_t* n_tensors, uint64_t* n_kv) {
  uint8_t magic[4] = {};
  if (Status s = p.Read(&magic, [] { return std::string("magic"); }); !s.ok()) return s;
  if (std::memcmp(magic, gguf_internal::kMagic, sizeof(magic)) != 0) {
    return p.Error("bad magic " +
                   Quote(std::string_view(reinterpret_cast<const char*>(magic), sizeof(magic))) +
                   " (expected 'GGUF'): not a GGUF file");
  }
  if (Status s = p.Read(&version, [] { return std::string("version"); }); !s.ok()) return s;
  if (version != 2 && version != 3) {
    const uint32_t swapped = __builtin_bswap32(version);
    if (version > 0xffff && swapped >= 1 && swapped <= 3) {
      return p.Error("big-endian GGUF not supported (version field reads " +
                     std::to_string(version) + ", byte-swapped " + std::to_string(swapped) + ")");
    }
    return p.Error("unsupported GGUF version " + std::to_string(version) +
                   " (only versions 2 and 3 are supported)");
  }
  if (Status s = p.Read(n_tensors, [] { return std::string("tensor count"); }); !s.ok()) return s;
  if (Status s = p.Read(n_kv, [] { return std::string("metadata count"); }); !s.ok()) return s;

  // Smallest possible entries: a kv is key length + type + 1 value byte; a tensor info is name
  // length + n_dims + one dim + type + offset.
  constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
  constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;
  if (*n_kv > p.remaining() / kMinKvBytes) {
    return p.Error("metadata count " + std::to_string(*n_kv) + " cannot fit in the " +
                   std::to_string(p.remaining()) + " bytes after the header");
  }
  const uint64_t after_kv = p.remaining() - *n_kv * kMinKvBytes;
  if (*n_tensors > after_kv / kMinTensorInfoBytes) {
    return p.Error("tensor count " + std::to_string(*n_tensors) + " cannot fit in the " +
                   std::to_string(p.remaining()) + " bytes after the header");
  }
  return Status::Ok();
}

Status GgufFile::Impl::ParseMetadata(Parser& p, uint64_t n_kv) {
  metadata.reserve(n_kv);
  for (uint64_t k = 0; k < n_kv; ++k) {
    GgufKv kv;
    if (Status s =
            p.ReadString(&kv.key, [&] { return "key of metadata entry " + std::to_string(k); });
        !s.ok()) {
      return s;
    }
    if (kv.key.empty()) return p.Error("metadata entry " + std::to_string(k) + " has an empty key");
    if (kv_index.contains(kv.key)) return p.Error("duplicate metadata key " + Quote(kv.key));
    uint32_t type = 0;
    if (Status s = p.Read(&type, [&] { return "value type of " + Quote(kv.key); }); !s.ok()) {
      return s;
    }
    if (!IsKnownValueType(type)) {
      return p.Error("unknown value type " + std::to_string(type) + " for " + Quote(kv.key));
    }
    if (Status s = p.ReadValue(static_cast<GgufType>(type), 0, kv.key, &kv.value); !s.ok()) {
      return s;
    }
    if (kv.key == gguf_internal::kAlignmentKey) {
      if (kv.value.type != GgufType::kUint32) {
        return p.Error(std::string(gguf_internal::kAlignmentKey) + " must be u32, not " +
                       std::string(GgufTypeName(kv.value.type)));
      }
      if (!gguf_internal::IsPowerOfTwo(kv.value.u)) {
        return p.Error(std::string(gguf_internal::kAlignmentKey) + " " +
                       std::to_string(kv.value.u) + " is not a power of two");
      }
      alignment = kv.value.u;
    }
    kv_index.emplace(kv.key, metadata.size());
    metadata.push_back(std::move(kv));
  }
  return Status::Ok();
}

Status GgufFile::Impl::ParseTensorInfos(Parser& p, uint64_t n_tensors) {
  tensors.reserve(n_tensors);
  for (uint64_t t = 0; t < n_tensors; ++t) {
    GgufTensorInfo info;
    if (Status s = p.ReadString(&info.name, [&] { return "name of tensor " + std::to_string(t); });
        !s.ok()) {
      return s;
    }
    if (info.name.empty()) return p.Error("tensor " + std::to_string(t) + " has an empty name");
    if (tensor_index.contains(info.name))
      return p.Error("duplicate tensor name " + Quote(info.name));
    const std::string tensor = "tensor " + Quote(info.name);
    uint32_t n_dims = 0;
    if (Status s = p.Read(&n_dims, [&] { return "n_dims of " + tensor; }); !s.ok()) return s;
    if (n_dims == 0 || n_dims > static_cast<uint32_t>(gguf_internal::kMaxDims)) {
      return p.Error(tensor + ": n_dims " + std::to_string(n_dims) + " is outside 1.." +
                     std::to_string(gguf_internal::kMaxDims));
    }
    info.ne.resize(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = 0;
      if (Status s = p.Read(&dim, [&] { return "shape of " + tensor; }); !s.ok()) return s;
      info.ne[d] = static_cast<int64_t>(dim);  // values above INT64_MAX become negative: rejected
    }
    uint32_t type_id = 0;
    if (Status s = p.Read(&type_id, [&] { return "type of " + tensor; }); !s.ok()) return s;
    if (!TypeInfo(type_id)) {
      return p.Error(tensor + ": unknown ggml type id " + std::to_string(type_id));
    }
    info.type = static_cast<GgmlType>(type_id);
    if (Status s = p.Read(&info.offset, [&] { return "offset of " + tensor; }); !s.ok()) return s;

    Result<gguf_internal::TensorSize> size = gguf_internal::SizeTensor(info.type, info.ne);
    if (!size.ok()) return p.Error(tensor + ": " + size.message());
    info.n_elements = size->n_elements;
    info.n_bytes = size->n_bytes;
    if (info.offset % alignment != 0) {
      return p.Error(tensor + ": offset " + std::to_string(info.offset) +
                     " is not a multiple of the alignment " + std::to_string(alignment));
    }
    tensor_index.emplace(info.name, tensors.size());
    tensors.push_back(std::move(info));
  }
  return Status::Ok();
}

Status GgufFile::Impl::CheckTensorRanges(const Parser& p) {
  const uint64_t file_size = bytes.size();
  for (const GgufTensorInfo& info : tensors) {
    std::optional<uint64_t> begin = CheckedAdd(data_offset, info.offset);
    std::optional<uint64_t> end = begin ? CheckedAdd(*begin, info.n_bytes) : std::nullopt;
    if (!end || *end > file_size) {
      const std::string where =
          begin ? std::to_string(*begin)
                : std::to_string(data_offset) + " + " + std::to_string(info.offset);
      return p.Error("tensor " + Quote(info.name) + " data [offset " + where + ", " +
                     std::to_string(info.n_bytes) + " bytes] extends past end of file (" +
                     std::to_string(file_size) + " bytes)");
    }
  }
  // Overlapping tensors would alias each other's weights: almost certainly a corrupt file.
  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(tensors.size());
  for (const GgufTensorInfo& info : tensors) by_offset.push_back(&info);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& prev = *by_offset[i - 1];
    const GgufTensorInfo& cur = *by_offset[i];
    if (prev.offset + prev.n_bytes > cur.offset) {  // no overflow: both ranges are inside the file
      return p.Error("tensor " + Quote(cur.name) + " data overlaps tensor " + Quote(prev.name));
    }
  }
  return Status::Ok();
}

Status GgufFile::Impl::Parse() {
  Parser p(bytes, display_name);
  uint64_t n_tensors = 0;
  uint64_t n_kv = 0;
  if (Status s = ParseHeader(p, &n_tensors, &n_kv); !s.ok()) return s;
  if (Status s = ParseMetadata(p, n_kv); !s.ok()) return s;
  if (Status s = ParseTensorInfos(p, n_tensors); !s.ok()) return s;
  std::optional<uint64_t> aligned = gguf_internal::AlignUp(p.pos(), alignment);
  if (!aligned) return p.Error("data section offset overflows");
  // A file without tensors may end right after its metadata, without padding.
  data_offset = *aligned;
  return CheckTensorRanges(p);
}

GgufFile::GgufFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

namespace {

// Reads the whole of fd into dst (WeightMemory::kCopied).
Status ReadWhole(int fd, uint8_t* dst, size_t size, const std::string& name) {
  size_t done = 0;
  while (done < size) {
    const size_t want = std::min<size_t>(size - done, size_t{1} << 30);
    const ssize_t got = ::pread(fd, dst + done, want, static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return Status::Error(name + ": cannot read: " + ErrnoMessage(errno));
    if (got == 0) {
      return Status::Error(name + ": file shrank while being read (" + std::to_string(done) +
                           " of " + std::to_string(size) + " bytes)");
    }
    done += static_cast<size_t>(got);
  }
  return Status::Ok();
}

}  // namespace

Result<GgufFile> GgufFile::Open(const std::filesystem::path& path, WeightMemory memory) {
  std::string name = path.string();
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer before the type check below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Status::Error(name + ": cannot open: " + ErrnoMessage(errno));
  FdCloser closer(fd);
  struct stat st = {};
  if (::fstat(fd, &st) != 0) return Status::Error(name + ": cannot stat: " + ErrnoMessage(errno));
  if (!S_ISREG(st.st_mode)) return Status::Error(name + ": not a regular file");
  const auto size = static_cast<size_t>(st.st_size);
  std::unique_ptr<Impl> impl;
  if (size == 0) {
    impl = std::make_unique<Impl>(std::move(name), std::span<const uint8_t>());
  } else if (memory == WeightMemory::kMapped) {
    // Read-only private mapping: weights are paged in on demand and never copied.
    void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) return Status::Error(name + ": cannot mmap: " + ErrnoMessage(errno));
    impl = std::make_unique<Impl>(std::move(name), addr, size);
  } else {
    // A private anonymous mapping, made read-only once filled (a stray write faults, as on the
    // file mapping); huge pages are asked for, and the kernel may decline.
    void* addr = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (addr == MAP_FAILED) {
      return Status::Error(name + ": cannot allocate " + std::to_string(size) +
                           " bytes for the weights: " + ErrnoMessage(errno));
    }
    ::madvise(addr, size, MADV_HUGEPAGE);
    impl = std::make_unique<Impl>(std::move(name), addr, size);  // owns the mapping from here
    PRIMEKV_RETURN_IF_ERROR(ReadWhole(fd, static_cast<uint8_t*>(addr), size, impl->display_name));
    if (::mprotect(addr, size, PROT_READ) != 0) {
      return Status::Error(impl->display_name +
                           ": cannot protect the weights: " + ErrnoMessage(errno));
    }
  }
  if (Status s = impl->Parse(); !s.ok()) return s;
  return GgufFile(std::move(impl));
}

Result<GgufFile> GgufFile::FromMemory(std::span<const uint8_t> bytes, std::string display_name) {
  auto impl = std::make_unique<Impl>(std::move(display_name), bytes);
  if (Status s = impl->Parse(); !s.ok()) return s;
  return GgufFile(std::move(impl));
}

const std::string& GgufFile::display_name() const { return impl_->display_name; }
uint32_t GgufFile::version() const { return impl_->version; }
uint64_t GgufFile::alignment() const { return impl_->alignment; }
uint64_t GgufFile::data_offset() const { return impl_->data_offset; }
uint64_t GgufFile::file_size() const { return impl_->bytes.size(); }
const std::vector<GgufKv>& GgufFile::metadata() const { return impl_->metadata; }

void GgufFile::ReleaseMetadata() {
  std::vector<GgufKv>().swap(impl_->metadata);
  impl_->kv_index.clear();
}
const std::vector<GgufTensorInfo>& GgufFile::tensors() const { return impl_->tensors; }

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = impl_->kv_index.find(key);
  return it == impl_->kv_index.end() ? nullptr : &impl_->metadata[it->second].value;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

std::optional<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  return v ? AsInt(*v) : std::nullopt;
}

std::optional<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v || (v->type != GgufType::kFloat32 && v->type != GgufType::kFloat64)) return std::nullopt;
  return v->f;
}

std::optional<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v || v->type != GgufType::kBool) return std::nullopt;
  return v->u != 0;
}

std::optional<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v || v->type != GgufType::kString) return std::nullopt;
  return v->s;
}

std::optional<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v || v->type != GgufType::kArray || v->array_type != GgufType::kString) return std::nullopt;
  std::vector<std::string> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) out.push_back(e.s);
  return out;
}

std::optional<std::vector<float>> GgufFile::GetFloatArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v || v->type != GgufType::kArray ||
      (v->array_type != GgufType::kFloat32 && v->array_type != GgufType::kFloat64)) {
    return std::nullopt;
  }
  std::vector<float> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) out.push_back(static_cast<float>(e.f));
  return out;
}

std::optional<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v || v->type != GgufType::kArray || !IsInteger(v->array_type)) return std::nullopt;
  std::vector<int64_t> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) {
    std::optional<int64_t> x = AsInt(e);
    if (!x) return std::nullopt;
    out.push_back(*x);
  }
  return out;
}

std::span<const uint8_t> GgufFile::TensorData(const GgufTensorInfo& info) const {
  const uint64_t size = impl_->bytes.size();
  // Ranges were checked at open; this guards against an info from another file.
  Check(impl_->data_offset <= size && info.offset <= size - impl_->data_offset &&
            info.n_bytes <= size - impl_->data_offset - info.offset,
        "GgufFile::TensorData: tensor info does not belong to this file");
  return impl_->bytes.subspan(impl_->data_offset + info.offset, info.n_bytes);
}

}  // namespace primekv
