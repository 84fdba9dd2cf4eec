#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "gguf/layout.h"
#include "primekv/gguf/gguf.h"
#include "primekv/util/file_io.h"

namespace primekv {

static_assert(std::endian::native == std::endian::little,
              "the GGUF writer assumes a little-endian host");

namespace {

using gguf_internal::AlignUp;
using gguf_internal::IsPowerOfTwo;
using gguf_internal::ValueKind;
using gguf_internal::ValueType;
using gguf_internal::ValueTypeInfo;

template <typename T>
void Put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void PutString(std::vector<uint8_t>& out, std::string_view s) {
  Put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

// Programmer errors only: a value whose fields disagree with its declared type.
void CheckValue(const GgufValue& v) {
  const ValueTypeInfo* info = ValueType(v.type);
  Check(info != nullptr, "GgufValue: unknown type");
  const int bits = 8 * info->bytes;
  switch (info->kind) {
    case ValueKind::kUnsigned:
      if (bits < 64) Check(v.u < uint64_t{1} << bits, "GgufValue: unsigned out of range");
      return;
    case ValueKind::kBool:
      return Check(v.u <= 1, "GgufValue: unsigned out of range");
    case ValueKind::kSigned:
      if (bits < 64) {
        const int64_t limit = int64_t{1} << (bits - 1);
        Check(v.i >= -limit && v.i < limit, "GgufValue: signed out of range");
      }
      return;
    case ValueKind::kFloat:
    case ValueKind::kString:
      return;
    case ValueKind::kArray:
      for (const GgufValue& e : v.array) {
        Check(e.type == v.array_type, "GgufValue: array element type differs from array_type");
        CheckValue(e);
      }
      return;
  }
}

// Integers as their low `bytes` bytes, little-endian (the host's order).
void PutValue(std::vector<uint8_t>& out, const GgufValue& v) {
  const ValueTypeInfo* info = ValueType(v.type);
  const auto put_low = [&](const void* value) {
    const auto* p = static_cast<const uint8_t*>(value);
    out.insert(out.end(), p, p + info->bytes);
  };
  switch (info->kind) {
    case ValueKind::kUnsigned:
    case ValueKind::kBool:
      return put_low(&v.u);
    case ValueKind::kSigned:
      return put_low(&v.i);
    case ValueKind::kFloat:
      return info->bytes == 4 ? Put(out, static_cast<float>(v.f)) : Put(out, v.f);
    case ValueKind::kString:
      return PutString(out, v.s);
    case ValueKind::kArray:
      Put(out, static_cast<uint32_t>(v.array_type));
      Put<uint64_t>(out, v.array.size());
      for (const GgufValue& e : v.array) PutValue(out, e);
      return;
  }
}

void PadTo(std::vector<uint8_t>& out, uint64_t alignment) {
  std::optional<uint64_t> end = AlignUp(out.size(), alignment);
  out.resize(*end, 0);
}

std::string ErrnoMessage(int err) { return std::system_category().message(err); }

Status WriteAll(int fd, std::span<const uint8_t> bytes, const std::string& name) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Error(name + ": write failed: " + ErrnoMessage(errno));
    }
    bytes = bytes.subspan(static_cast<size_t>(n));
  }
  return Status::Ok();
}

}  // namespace

void GgufWriter::SetVersion(uint32_t version) {
  Check(version == 2 || version == 3, "GgufWriter::SetVersion: only versions 2 and 3");
  version_ = version;
}

void GgufWriter::SetAlignment(uint32_t alignment) {
  Check(IsPowerOfTwo(alignment), "GgufWriter::SetAlignment: alignment must be a power of two");
  Add(gguf_internal::kAlignmentKey, GgufValue::Uint32(alignment));
}

void GgufWriter::Add(std::string key, GgufValue value) {
  CheckValue(value);
  if (key == gguf_internal::kAlignmentKey && value.type == GgufType::kUint32 &&
      IsPowerOfTwo(value.u)) {
    alignment_ = static_cast<uint32_t>(value.u);
    alignment_written_ = true;
  }
  for (GgufKv& kv : kvs_) {
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  }
  kvs_.push_back(GgufKv{std::move(key), std::move(value)});
}

Status GgufWriter::CheckNewTensor(const std::string& name, GgmlType type,
                                  const std::vector<int64_t>& ne, uint64_t* n_bytes) const {
  if (name.empty()) return Status::Error("GgufWriter: tensor name is empty");
  for (const Tensor& t : tensors_) {
    if (t.name == name) return Status::Error("GgufWriter: duplicate tensor name '" + name + "'");
  }
  Result<gguf_internal::TensorSize> size = gguf_internal::SizeTensor(type, ne);
  if (!size.ok()) return Status::Error("GgufWriter: tensor '" + name + "': " + size.message());
  *n_bytes = size->n_bytes;
  return Status::Ok();
}

Status GgufWriter::AddTensor(std::string name, GgmlType type, std::vector<int64_t> ne,
                             std::vector<uint8_t> data) {
  uint64_t n_bytes = 0;
  PRIMEKV_RETURN_IF_ERROR(CheckNewTensor(name, type, ne, &n_bytes));
  if (data.size() != n_bytes) {
    return Status::Error("GgufWriter: tensor '" + name + "' has " + std::to_string(data.size()) +
                         " bytes of data but its type and shape need " + std::to_string(n_bytes));
  }
  tensors_.push_back(Tensor{std::move(name), type, std::move(ne), std::move(data), n_bytes, {}});
  return Status::Ok();
}

Status GgufWriter::AddTensorSource(std::string name, GgmlType type, std::vector<int64_t> ne,
                                   TensorFill fill) {
  uint64_t n_bytes = 0;
  PRIMEKV_RETURN_IF_ERROR(CheckNewTensor(name, type, ne, &n_bytes));
  tensors_.push_back(Tensor{std::move(name), type, std::move(ne), {}, n_bytes, std::move(fill)});
  return Status::Ok();
}

namespace {

// Header, metadata, tensor infos and the padding up to the data section. `Tensors` is the
// writer's private tensor list (name, type, ne, data).
template <typename Tensors>
std::vector<uint8_t> SerializeHead(uint32_t version, uint32_t alignment,
                                   const std::vector<GgufKv>& kvs, const Tensors& tensors) {
  std::vector<uint8_t> out(std::begin(gguf_internal::kMagic), std::end(gguf_internal::kMagic));
  Put(out, version);
  Put<uint64_t>(out, tensors.size());
  Put<uint64_t>(out, kvs.size());
  for (const GgufKv& kv : kvs) {
    PutString(out, kv.key);
    Put(out, static_cast<uint32_t>(kv.value.type));
    PutValue(out, kv.value);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    PutString(out, t.name);
    Put(out, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) Put(out, static_cast<uint64_t>(d));
    Put(out, static_cast<uint32_t>(t.type));
    Put(out, offset);
    offset = *AlignUp(offset + t.n_bytes, alignment);
  }
  PadTo(out, alignment);
  return out;
}

}  // namespace

std::vector<uint8_t> GgufWriter::Serialize() const {
  std::vector<uint8_t> out = SerializeHead(version_, alignment_, kvs_, tensors_);
  for (const Tensor& t : tensors_) {
    if (t.fill) {
      const size_t at = out.size();
      out.resize(at + t.n_bytes);
      const Status s = t.fill(std::span(out).subspan(at, t.n_bytes));
      Check(s.ok(), "GgufWriter::Serialize: a tensor source failed");
    } else {
      out.insert(out.end(), t.data.begin(), t.data.end());
    }
    PadTo(out, alignment_);
  }
  return out;
}

namespace {

Status ValidateValue(const GgufValue& v, const std::string& key, int depth) {
  if (v.type == GgufType::kString && v.s.size() > kGgufMaxStringLength)
    return Status::Error("value of '" + key + "' is longer than the reader's string limit");
  if (v.type == GgufType::kFloat32 || v.type == GgufType::kFloat64) {
    if (!std::isfinite(v.f)) return Status::Error("value of '" + key + "' is not finite");
    if (v.type == GgufType::kFloat32 && std::fabs(v.f) > std::numeric_limits<float>::max())
      return Status::Error("value of '" + key + "' overflows float32");
  }
  if (v.type == GgufType::kArray) {
    if (depth + 1 > kGgufMaxArrayDepth)
      return Status::Error("arrays of '" + key + "' are nested too deep for the reader");
    for (const GgufValue& e : v.array) {
      if (Status s = ValidateValue(e, key, depth + 1); !s.ok()) return s;
    }
  }
  return Status::Ok();
}

}  // namespace

Status GgufWriter::Validate() const {
  for (const GgufKv& kv : kvs_) {
    if (kv.key.empty()) return Status::Error("GgufWriter: empty metadata key");
    if (kv.key.size() > kGgufMaxStringLength)
      return Status::Error("GgufWriter: metadata key longer than the reader's string limit");
    if (kv.key == gguf_internal::kAlignmentKey &&
        (kv.value.type != GgufType::kUint32 || !IsPowerOfTwo(kv.value.u))) {
      return Status::Error(std::string("GgufWriter: ") + gguf_internal::kAlignmentKey +
                           " must be a u32 power of two");
    }
    if (Status s = ValidateValue(kv.value, kv.key, 0); !s.ok())
      return Status::Error("GgufWriter: " + s.message());
  }
  return Status::Ok();
}

Status GgufWriter::WriteFile(const std::filesystem::path& path) const {
  const std::string name = path.string();
  if (name.empty()) return Status::Error("the output path is empty");
  if (Status s = Validate(); !s.ok()) return Status::Error(name + ": " + s.message());
  // Only a regular file may be replaced: renaming over a device, FIFO, directory or symbolic
  // link would destroy something that is not ours (a link was replaced by a plain file).
  PRIMEKV_RETURN_IF_ERROR(CheckReplaceableOutput(name, "output"));
  // Write beside the target (a fresh name, never an existing file) and rename, so readers never
  // see a half-written file.
  std::string tmp = name + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0)
    return Status::Error(name + ": cannot create a temporary file: " + ErrnoMessage(errno));
  ::fchmod(fd, 0644);

  Status status = WriteAll(fd, SerializeHead(version_, alignment_, kvs_, tensors_), tmp);
  const std::vector<uint8_t> zeros(alignment_, 0);
  std::vector<uint8_t> made;  // one source tensor at a time
  for (size_t t = 0; t < tensors_.size() && status.ok(); ++t) {
    const Tensor& tensor = tensors_[t];
    std::span<const uint8_t> data = tensor.data;
    if (tensor.fill) {
      made.resize(tensor.n_bytes);
      status = tensor.fill(made);
      if (!status.ok()) break;
      data = made;
    }
    status = WriteAll(fd, data, tmp);
    const uint64_t padding = *AlignUp(data.size(), alignment_) - data.size();
    if (status.ok()) status = WriteAll(fd, std::span(zeros).first(padding), tmp);
  }
  if (::close(fd) != 0 && status.ok()) {
    status = Status::Error(tmp + ": close failed: " + ErrnoMessage(errno));
  }
  if (status.ok() && std::rename(tmp.c_str(), name.c_str()) != 0) {
    status = Status::Error(name + ": cannot rename from " + tmp + ": " + ErrnoMessage(errno));
  }
  if (!status.ok()) ::unlink(tmp.c_str());
  return status;
}

}  // namespace primekv
