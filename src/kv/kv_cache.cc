#include "primekv/kv/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "primekv/quant/quant.h"
#include "primekv/util/dtype.h"

namespace primekv {

const char* KvDTypeName(KvDType t) {
  switch (t) {
    case KvDType::kF32:
      return "f32";
    case KvDType::kF16:
      return "f16";
    case KvDType::kQ8_0:
      return "q8_0";
  }
  return "?";
}

namespace {
GgmlType StorageType(KvDType t) {
  return t == KvDType::kF32 ? GgmlType::kF32
                            : (t == KvDType::kF16 ? GgmlType::kF16 : GgmlType::kQ8_0);
}

// Block facts from the one table of GGML types.
GgmlTypeInfo StorageInfo(KvDType t) { return *TypeInfo(StorageType(t)); }
}  // namespace

size_t KvRowBytes(KvDType t, int head_dim) {
  const GgmlTypeInfo info = StorageInfo(t);
  return static_cast<size_t>(head_dim / info.block_size) * info.block_bytes;
}

Status CheckKvDType(KvDType t, int head_dim) {
  if (head_dim % StorageInfo(t).block_size != 0) {
    return Status::Error(std::string("--kv-type ") + KvDTypeName(t) +
                         " needs a head dimension that is a multiple of " +
                         std::to_string(StorageInfo(t).block_size) + "; this model's is " +
                         std::to_string(head_dim) + " (use f16 or f32)");
  }
  return Status::Ok();
}

// Pages come from chunks of kPagesPerChunk; freed pages go on a free list and are reused first,
// so compressing one head makes room for another head's growth.
struct KvCache::Pool {
  static constexpr int kPagesPerChunk = 64;
  size_t page_bytes = 0;
  size_t key_bytes = 0;  // bytes of the keys (and of the values) in one page
  int page_tokens = 0;
  std::vector<std::unique_ptr<uint8_t[]>> chunks;
  std::vector<KvPage> pages;
  std::vector<int> free_list;

  void AddChunk() {
    chunks.emplace_back(new uint8_t[page_bytes * kPagesPerChunk]);
    uint8_t* base = chunks.back().get();
    const int first = static_cast<int>(pages.size());
    for (int i = 0; i < kPagesPerChunk; ++i) {
      uint8_t* p = base + page_bytes * static_cast<size_t>(i);
      pages.push_back(KvPage{p, p + key_bytes, reinterpret_cast<int32_t*>(p + 2 * key_bytes)});
    }
    // Reverse order so the lowest page id is handed out first.
    std::vector<int> fresh;
    for (int i = kPagesPerChunk - 1; i >= 0; --i) fresh.push_back(first + i);
    free_list.insert(free_list.begin(), fresh.begin(), fresh.end());
  }

  int Acquire() {
    if (free_list.empty()) AddChunk();
    const int id = free_list.back();
    free_list.pop_back();
    return id;
  }
  void Release(int id) { free_list.push_back(id); }
};

KvCache::KvCache(int n_layers, int n_kv_heads, int head_dim, KvCacheOptions options)
    : n_layers_(n_layers),
      n_kv_heads_(n_kv_heads),
      head_dim_(head_dim),
      options_(options),
      heads_(static_cast<size_t>(n_layers) * n_kv_heads),
      pool_(std::make_unique<Pool>()) {
  Check(n_layers > 0 && n_kv_heads > 0 && head_dim > 0, "KvCache shape must be positive");
  Check(options_.page_tokens > 0, "page_tokens must be positive");
  Check(CheckKvDType(options_.dtype, head_dim).ok(), "KV type does not fit the head dimension");
  pool_->page_tokens = options_.page_tokens;
  pool_->key_bytes =
      static_cast<size_t>(options_.page_tokens) * KvRowBytes(options_.dtype, head_dim_);
  // Positions follow keys and values; keep each page 64-byte aligned for the kernels.
  const size_t raw = 2 * pool_->key_bytes + sizeof(int32_t) * options_.page_tokens;
  pool_->page_bytes = (raw + 63) / 64 * 64;
}

KvCache::KvCache(KvCache&&) noexcept = default;
KvCache& KvCache::operator=(KvCache&&) noexcept = default;
KvCache::~KvCache() = default;

KvCache KvCache::Clone() const {
  KvCache copy(n_layers_, n_kv_heads_, head_dim_, options_);
  copy.next_position_ = next_position_;
  for (int l = 0; l < n_layers_; ++l) {
    for (int h = 0; h < n_kv_heads_; ++h) {
      const HeadState& src = Head(l, h);
      HeadState& dst = copy.Head(l, h);
      dst.length = src.length;
      for (int page : src.pages) {
        int id = copy.pool_->Acquire();
        // A page's keys pointer is the start of its block (keys, values, positions).
        std::memcpy(copy.pool_->pages[id].keys, pool_->pages[page].keys, pool_->page_bytes);
        dst.pages.push_back(id);
      }
    }
  }
  copy.live_entries_ = live_entries_;
  copy.peak_bytes_in_use_ = copy.BytesInUse();
  return copy;
}

int KvCache::Length(int layer, int kv_head) const { return Head(layer, kv_head).length; }

int KvCache::MaxLength() const {
  int m = 0;
  for (const auto& h : heads_) m = std::max(m, h.length);
  return m;
}

int64_t KvCache::TotalEntries() const { return live_entries_; }

size_t KvCache::BytesPerEntry() const {
  return 2 * KvRowBytes(options_.dtype, head_dim_) + sizeof(int32_t);
}

size_t KvCache::BytesInUse() const { return static_cast<size_t>(live_entries_) * BytesPerEntry(); }

size_t KvCache::BytesReserved() const {
  return (pool_->pages.size() - pool_->free_list.size()) * pool_->page_bytes;
}

size_t KvCache::BytesAllocated() const { return pool_->pages.size() * pool_->page_bytes; }

size_t KvCache::BytesAllocatedAfterReserve(int extra) const {
  const int pt = options_.page_tokens;
  size_t pages_needed = 0;
  for (const auto& head : heads_) {
    const size_t want = static_cast<size_t>((head.length + extra + pt - 1) / pt);
    if (want > head.pages.size()) pages_needed += want - head.pages.size();
  }
  size_t pages = pool_->pages.size();
  const size_t free = pool_->free_list.size();
  if (pages_needed > free) {
    const size_t chunk = Pool::kPagesPerChunk;
    pages += (pages_needed - free + chunk - 1) / chunk * chunk;
  }
  return pages * pool_->page_bytes;
}

void KvCache::TrackPeak() { peak_bytes_in_use_ = std::max(peak_bytes_in_use_, BytesInUse()); }

void KvCache::WriteRow(const KvPage& page, int slot, const float* k, const float* v, int32_t pos) {
  const size_t off = static_cast<size_t>(slot) * KvRowBytes(options_.dtype, head_dim_);
  if (options_.dtype == KvDType::kF32) {
    std::memcpy(static_cast<uint8_t*>(page.keys) + off, k, sizeof(float) * head_dim_);
    std::memcpy(static_cast<uint8_t*>(page.values) + off, v, sizeof(float) * head_dim_);
  } else {
    const GgmlType type = StorageType(options_.dtype);
    quant::QuantizeRow(type, k, static_cast<uint8_t*>(page.keys) + off, head_dim_);
    quant::QuantizeRow(type, v, static_cast<uint8_t*>(page.values) + off, head_dim_);
  }
  page.positions[slot] = pos;
}

void KvCache::CopyRow(const KvPage& from, int from_slot, const KvPage& to, int to_slot) {
  const size_t row = KvRowBytes(options_.dtype, head_dim_);
  std::memmove(static_cast<uint8_t*>(to.keys) + row * to_slot,
               static_cast<const uint8_t*>(from.keys) + row * from_slot, row);
  std::memmove(static_cast<uint8_t*>(to.values) + row * to_slot,
               static_cast<const uint8_t*>(from.values) + row * from_slot, row);
  to.positions[to_slot] = from.positions[from_slot];
}

Status KvCache::Append(int layer, MatView<const float> k, MatView<const float> v,
                       std::span<const int32_t> positions) {
  Check(layer >= 0 && layer < n_layers_, "KvCache::Append: layer out of range");
  Check(k.rows == v.rows && k.rows == static_cast<int64_t>(positions.size()),
        "KvCache::Append: row counts differ");
  Check(k.cols == static_cast<int64_t>(n_kv_heads_) * head_dim_ && v.cols == k.cols,
        "KvCache::Append: width is not n_kv_heads * head_dim");
  const int n = static_cast<int>(k.rows);
  if (n == 0) return Status::Ok();
  for (int i = 1; i < n; ++i) {
    if (positions[i] <= positions[i - 1])
      return Status::Error("KV append: positions not increasing");
  }
  const int pt = options_.page_tokens;
  for (int h = 0; h < n_kv_heads_; ++h) {
    HeadState& head = Head(layer, h);
    if (options_.max_tokens_per_head > 0 && head.length + n > options_.max_tokens_per_head) {
      return Status::Error("KV cache full: layer " + std::to_string(layer) + " head " +
                           std::to_string(h) + " holds " + std::to_string(head.length) +
                           " entries, limit " + std::to_string(options_.max_tokens_per_head));
    }
    if (head.length > 0 && PositionAt(layer, h, head.length - 1) >= positions[0]) {
      return Status::Error("KV append: position " + std::to_string(positions[0]) +
                           " is not after the cached positions");
    }
  }
  for (int h = 0; h < n_kv_heads_; ++h) {
    HeadState& head = Head(layer, h);
    for (int i = 0; i < n; ++i) {
      const int slot = head.length % pt;
      if (slot == 0 && head.length / pt == static_cast<int>(head.pages.size())) {
        head.pages.push_back(pool_->Acquire());
      }
      const KvPage& page = pool_->pages[head.pages[head.length / pt]];
      WriteRow(page, slot, k.Row(i) + static_cast<int64_t>(h) * head_dim_,
               v.Row(i) + static_cast<int64_t>(h) * head_dim_, positions[i]);
      ++head.length;
    }
  }
  live_entries_ += static_cast<int64_t>(n) * n_kv_heads_;
  if (layer == n_layers_ - 1 || positions.back() + 1 > next_position_) {
    next_position_ = std::max(next_position_, positions.back() + 1);
  }
  TrackPeak();
  return Status::Ok();
}

Status KvCache::CheckHeadAppend(int layer, int kv_head, std::span<const int32_t> positions) {
  if (layer < 0 || layer >= n_layers_ || kv_head < 0 || kv_head >= n_kv_heads_)
    return Status::Error("KV append: head out of range");
  const size_t n = positions.size();
  const HeadState& head = Head(layer, kv_head);
  if (options_.max_tokens_per_head > 0 &&
      static_cast<size_t>(head.length) + n > static_cast<size_t>(options_.max_tokens_per_head))
    return Status::Error("KV cache full");
  for (size_t i = 0; i < n; ++i) {
    const bool after_prev =
        i > 0 ? positions[i] > positions[i - 1]
              : head.length == 0 || positions[0] > PositionAt(layer, kv_head, head.length - 1);
    if (!after_prev || positions[i] < 0)
      return Status::Error("KV append: positions not increasing");
  }
  return Status::Ok();
}

template <typename Write>
void KvCache::AppendRows(int layer, int kv_head, std::span<const int32_t> positions, Write write) {
  HeadState& head = Head(layer, kv_head);
  const size_t n = positions.size();
  const int pt = options_.page_tokens;
  for (size_t i = 0; i < n; ++i) {
    const int slot = head.length % pt;
    if (slot == 0 && head.length / pt == static_cast<int>(head.pages.size())) {
      head.pages.push_back(pool_->Acquire());
    }
    const KvPage& page = pool_->pages[head.pages[head.length / pt]];
    write(page, slot, i);
    page.positions[slot] = positions[i];
    ++head.length;
  }
  live_entries_ += static_cast<int64_t>(n);
  if (n > 0) next_position_ = std::max(next_position_, positions[n - 1] + 1);
  TrackPeak();
}

Status KvCache::AppendHead(int layer, int kv_head, std::span<const float> keys,
                           std::span<const float> values, std::span<const int32_t> positions) {
  PRIMEKV_RETURN_IF_ERROR(CheckHeadAppend(layer, kv_head, positions));
  const size_t n = positions.size();
  const size_t d = static_cast<size_t>(head_dim_);
  if (keys.size() != n * d || values.size() != n * d)
    return Status::Error("KV append: row sizes do not match head_dim");
  AppendRows(layer, kv_head, positions, [&](const KvPage& page, int slot, size_t i) {
    WriteRow(page, slot, keys.data() + i * d, values.data() + i * d, positions[i]);
  });
  return Status::Ok();
}

namespace {

// Whether every f16 value (or every q8_0 block's f16 scale) of `rows` is finite: an f16 with all
// exponent bits set is Inf or NaN.
bool StoredRowsFinite(KvDType t, std::span<const uint8_t> rows) {
  if (t == KvDType::kF32) {
    for (size_t at = 0; at + 4 <= rows.size(); at += 4) {
      float f;
      std::memcpy(&f, rows.data() + at, 4);
      if (!std::isfinite(f)) return false;
    }
    return true;
  }
  const size_t stride = t == KvDType::kF16 ? 2 : KvRowBytes(t, 32);  // one value, or one block
  for (size_t at = 0; at + 2 <= rows.size(); at += stride) {
    uint16_t h;
    std::memcpy(&h, rows.data() + at, 2);
    if ((h & 0x7C00) == 0x7C00) return false;
  }
  return true;
}

}  // namespace

Status KvCache::AppendHeadRaw(int layer, int kv_head, std::span<const uint8_t> keys,
                              std::span<const uint8_t> values, std::span<const int32_t> positions) {
  PRIMEKV_RETURN_IF_ERROR(CheckHeadAppend(layer, kv_head, positions));
  const size_t row = KvRowBytes(options_.dtype, head_dim_);
  if (keys.size() != positions.size() * row || values.size() != keys.size())
    return Status::Error("KV append: row sizes do not match the cache type");
  if (!StoredRowsFinite(options_.dtype, keys) || !StoredRowsFinite(options_.dtype, values))
    return Status::Error("KV append: a stored row holds Inf or NaN");
  AppendRows(layer, kv_head, positions, [&](const KvPage& page, int slot, size_t i) {
    std::memcpy(static_cast<uint8_t*>(page.keys) + row * slot, keys.data() + i * row, row);
    std::memcpy(static_cast<uint8_t*>(page.values) + row * slot, values.data() + i * row, row);
  });
  return Status::Ok();
}

void KvCache::Reserve(int extra) {
  const int pt = options_.page_tokens;
  size_t pages_needed = 0;
  for (auto& head : heads_) {
    const size_t want = static_cast<size_t>((head.length + extra + pt - 1) / pt);
    if (want > head.pages.size()) pages_needed += want - head.pages.size();
    head.pages.reserve(want);
  }
  while (pool_->free_list.size() < pages_needed) pool_->AddChunk();
  pool_->free_list.reserve(pool_->pages.size());
}

void KvCache::Retain(int layer, int kv_head, std::span<const int32_t> kept_rows) {
  HeadState& head = Head(layer, kv_head);
  const int pt = options_.page_tokens;
  int out = 0;
  int prev = -1;
  for (int32_t r : kept_rows) {
    Check(r > prev && r < head.length, "KvCache::Retain: rows must be sorted, unique, in range");
    prev = r;
    if (r != out) {
      CopyRow(pool_->pages[head.pages[r / pt]], r % pt, pool_->pages[head.pages[out / pt]],
              out % pt);
    }
    ++out;
  }
  live_entries_ -= head.length - out;
  head.length = out;
  const size_t pages_needed = static_cast<size_t>((out + pt - 1) / pt);
  while (head.pages.size() > pages_needed) {
    pool_->Release(head.pages.back());
    head.pages.pop_back();
  }
}

void KvCache::TruncateFrom(int32_t pos) {
  for (int l = 0; l < n_layers_; ++l) {
    for (int h = 0; h < n_kv_heads_; ++h) {
      HeadState& head = Head(l, h);
      int keep = head.length;
      while (keep > 0 && PositionAt(l, h, keep - 1) >= pos) --keep;
      if (keep == head.length) continue;
      std::vector<int32_t> rows(static_cast<size_t>(keep));
      for (int i = 0; i < keep; ++i) rows[i] = i;
      Retain(l, h, rows);
    }
  }
  next_position_ = std::min(next_position_, pos);
}

void KvCache::Clear() {
  for (auto& head : heads_) {
    for (int p : head.pages) pool_->Release(p);
    head.pages.clear();
    head.length = 0;
  }
  live_entries_ = 0;
  next_position_ = 0;
}

int KvCache::NumPages(int layer, int kv_head) const {
  const HeadState& head = Head(layer, kv_head);
  return (head.length + options_.page_tokens - 1) / options_.page_tokens;
}

const KvPage& KvCache::Page(int layer, int kv_head, int page) const {
  return pool_->pages[Head(layer, kv_head).pages[page]];
}

int32_t KvCache::PositionAt(int layer, int kv_head, int row) const {
  const int pt = options_.page_tokens;
  return Page(layer, kv_head, row / pt).positions[row % pt];
}

void KvCache::RowsToFloat(const void* rows, int count, float* out) const {
  const int64_t n = static_cast<int64_t>(count) * head_dim_;
  if (options_.dtype == KvDType::kF32) {
    std::memcpy(out, rows, sizeof(float) * n);
  } else {
    quant::DequantizeRow(StorageType(options_.dtype), rows, out, n);
  }
}

void KvCache::PageKeysToFloat(const KvPage& page, int count, float* out) const {
  RowsToFloat(page.keys, count, out);
}

void KvCache::PageValuesToFloat(const KvPage& page, int count, float* out) const {
  RowsToFloat(page.values, count, out);
}

void KvCache::ReadHead(int layer, int kv_head, std::vector<float>* keys, std::vector<float>* values,
                       std::vector<int32_t>* positions) const {
  const int len = Length(layer, kv_head);
  const int pt = options_.page_tokens;
  if (keys) keys->resize(static_cast<size_t>(len) * head_dim_);
  if (values) values->resize(static_cast<size_t>(len) * head_dim_);
  if (positions) positions->resize(static_cast<size_t>(len));
  for (int p = 0; p < NumPages(layer, kv_head); ++p) {
    const KvPage& page = Page(layer, kv_head, p);
    const int count = std::min(pt, len - p * pt);
    const size_t off = static_cast<size_t>(p) * pt * head_dim_;
    if (keys) PageKeysToFloat(page, count, keys->data() + off);
    if (values) PageValuesToFloat(page, count, values->data() + off);
    if (positions) std::copy(page.positions, page.positions + count, positions->data() + p * pt);
  }
}

void KvCache::ReadHeadRaw(int layer, int kv_head, std::vector<uint8_t>* keys,
                          std::vector<uint8_t>* values, std::vector<int32_t>* positions) const {
  ReadRowsRaw(layer, kv_head, 0, Length(layer, kv_head), keys, values, positions);
}

void KvCache::ReadRowsRaw(int layer, int kv_head, int first, int count, std::vector<uint8_t>* keys,
                          std::vector<uint8_t>* values, std::vector<int32_t>* positions) const {
  Check(first >= 0 && count >= 0 && first + count <= Length(layer, kv_head),
        "KvCache::ReadRowsRaw: rows out of range");
  const int pt = options_.page_tokens;
  const size_t row = KvRowBytes(options_.dtype, head_dim_);
  keys->resize(static_cast<size_t>(count) * row);
  values->resize(static_cast<size_t>(count) * row);
  positions->resize(static_cast<size_t>(count));
  for (int r = first; r < first + count;) {
    const KvPage& page = Page(layer, kv_head, r / pt);
    const int slot = r % pt;
    const size_t n = static_cast<size_t>(std::min(pt - slot, first + count - r));
    const size_t at = static_cast<size_t>(r - first);
    std::memcpy(keys->data() + at * row, static_cast<const uint8_t*>(page.keys) + slot * row,
                n * row);
    std::memcpy(values->data() + at * row, static_cast<const uint8_t*>(page.values) + slot * row,
                n * row);
    std::copy(page.positions + slot, page.positions + slot + n, positions->data() + at);
    r += static_cast<int>(n);
  }
}

void KvCache::ReadPositions(int layer, int kv_head, std::vector<int32_t>* positions) const {
  const int len = Length(layer, kv_head);
  const int pt = options_.page_tokens;
  positions->resize(static_cast<size_t>(len));
  for (int p = 0; p < NumPages(layer, kv_head); ++p) {
    const KvPage& page = Page(layer, kv_head, p);
    const int count = std::min(pt, len - p * pt);
    std::copy(page.positions, page.positions + count, positions->data() + p * pt);
  }
}

}  // namespace primekv
