#include "primekv/kv/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
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
// so compressing one head makes room for another head's growth. Caches that share the pool run
// on different threads: the chunk list, the reference counts and the free list are guarded.
struct KvCache::Pool {
  static constexpr int kPagesPerChunk = 64;
  size_t page_bytes = 0;
  size_t key_bytes = 0;  // bytes of the keys (and of the values) in one page
  int page_tokens = 0;
  mutable std::mutex mu;
  std::vector<std::unique_ptr<uint8_t[]>> chunks;
  std::vector<int> refs;  // caches holding each page; 0 = free
  std::vector<int> free_list;

  KvPage ViewLocked(int id) const {
    uint8_t* p = chunks[static_cast<size_t>(id / kPagesPerChunk)].get() +
                 page_bytes * static_cast<size_t>(id % kPagesPerChunk);
    return KvPage{p, p + key_bytes, reinterpret_cast<int32_t*>(p + 2 * key_bytes)};
  }

  void AddChunkLocked() {
    chunks.emplace_back(new uint8_t[page_bytes * kPagesPerChunk]);
    const int first = static_cast<int>(refs.size());
    refs.resize(refs.size() + kPagesPerChunk, 0);
    // Reverse order so the lowest page id is handed out first.
    std::vector<int> fresh;
    for (int i = kPagesPerChunk - 1; i >= 0; --i) fresh.push_back(first + i);
    free_list.insert(free_list.begin(), fresh.begin(), fresh.end());
  }

  PageSlot AcquireLocked() {
    if (free_list.empty()) AddChunkLocked();
    const int id = free_list.back();
    free_list.pop_back();
    refs[static_cast<size_t>(id)] = 1;
    return PageSlot{ViewLocked(id), id};
  }

  void ReleaseLocked(int id) {
    if (--refs[static_cast<size_t>(id)] == 0) free_list.push_back(id);
  }

  size_t AllocatedBytes() const {
    std::lock_guard lock(mu);
    return chunks.size() * kPagesPerChunk * page_bytes;
  }
};

KvCache::KvCache(int n_layers, int n_kv_heads, int head_dim, KvCacheOptions options)
    : KvCache(n_layers, n_kv_heads, head_dim, options, nullptr) {}

KvCache::KvCache(int n_layers, int n_kv_heads, int head_dim, KvCacheOptions options,
                 std::shared_ptr<Pool> pool)
    : n_layers_(n_layers),
      n_kv_heads_(n_kv_heads),
      head_dim_(head_dim),
      options_(options),
      heads_(static_cast<size_t>(n_layers) * n_kv_heads),
      pool_(std::move(pool)) {
  Check(n_layers > 0 && n_kv_heads > 0 && head_dim > 0, "KvCache shape must be positive");
  Check(options_.page_tokens > 0, "page_tokens must be positive");
  Check(CheckKvDType(options_.dtype, head_dim).ok(), "KV type does not fit the head dimension");
  if (pool_) return;
  pool_ = std::make_shared<Pool>();
  pool_->page_tokens = options_.page_tokens;
  pool_->key_bytes =
      static_cast<size_t>(options_.page_tokens) * KvRowBytes(options_.dtype, head_dim_);
  // Positions follow keys and values; keep each page 64-byte aligned for the kernels.
  const size_t raw = 2 * pool_->key_bytes + sizeof(int32_t) * options_.page_tokens;
  pool_->page_bytes = (raw + 63) / 64 * 64;
}

KvCache::KvCache(KvCache&& o) noexcept
    : n_layers_(o.n_layers_),
      n_kv_heads_(o.n_kv_heads_),
      head_dim_(o.head_dim_),
      options_(o.options_),
      next_position_(o.next_position_),
      expired_below_(o.expired_below_),
      heads_(std::move(o.heads_)),
      pool_(std::move(o.pool_)),
      live_entries_(o.live_entries_),
      peak_bytes_in_use_(o.peak_bytes_in_use_) {
  o.heads_.clear();
  o.live_entries_ = 0;
}

KvCache& KvCache::operator=(KvCache&& o) noexcept {
  if (this == &o) return *this;
  ReleaseAll();
  n_layers_ = o.n_layers_;
  n_kv_heads_ = o.n_kv_heads_;
  head_dim_ = o.head_dim_;
  options_ = o.options_;
  next_position_ = o.next_position_;
  expired_below_ = o.expired_below_;
  heads_ = std::move(o.heads_);
  pool_ = std::move(o.pool_);
  live_entries_ = o.live_entries_;
  peak_bytes_in_use_ = o.peak_bytes_in_use_;
  o.heads_.clear();
  o.live_entries_ = 0;
  return *this;
}

KvCache::~KvCache() { ReleaseAll(); }

void KvCache::ReleaseAll() {
  if (!pool_) return;
  std::lock_guard lock(pool_->mu);
  for (auto& head : heads_) {
    for (const PageSlot& slot : head.pages) pool_->ReleaseLocked(slot.id);
    head.pages.clear();
    head.length = 0;
  }
}

KvCache::PageSlot KvCache::NewPage(int first) {
  std::lock_guard lock(pool_->mu);
  PageSlot slot = pool_->AcquireLocked();
  slot.first = first;
  return slot;
}

bool KvCache::Exclusive(int id) const {
  std::lock_guard lock(pool_->mu);
  return pool_->refs[static_cast<size_t>(id)] == 1;
}

int KvCache::PageOf(const HeadState& head, int row) const {
  // Full pages put `row` at row / page_tokens; a partly filled page before it only moves it on.
  const auto at = [&](size_t i) {
    const PageSlot& s = head.pages[i];
    return row >= s.first && row < s.first + s.page.rows;
  };
  const size_t guess =
      std::min(static_cast<size_t>(row / options_.page_tokens), head.pages.size() - 1);
  if (at(guess)) return static_cast<int>(guess);
  const auto it =
      std::upper_bound(head.pages.begin() + static_cast<std::ptrdiff_t>(guess), head.pages.end(),
                       row, [](int r, const PageSlot& s) { return r < s.first; });
  return static_cast<int>(it - head.pages.begin()) - 1;
}

KvCache::PageSlot& KvCache::AppendTarget(HeadState& head, bool& own_last) {
  if (head.pages.empty() || !own_last || head.pages.back().page.rows == options_.page_tokens) {
    head.pages.push_back(NewPage(head.length));
    own_last = true;
  }
  return head.pages.back();
}

void KvCache::MakeWritable(HeadState& head, int index) {
  PageSlot& slot = head.pages[static_cast<size_t>(index)];
  PageSlot copy;
  {
    std::lock_guard lock(pool_->mu);
    if (pool_->refs[static_cast<size_t>(slot.id)] == 1) return;
    copy = pool_->AcquireLocked();
  }
  // The old page is still held here while it is read, so no other cache writes to it meanwhile
  // (it sees a count above one and copies too). A page's keys pointer starts its block.
  std::memcpy(copy.page.keys, slot.page.keys, pool_->page_bytes);
  {
    std::lock_guard lock(pool_->mu);
    pool_->ReleaseLocked(slot.id);
  }
  copy.page.rows = slot.page.rows;
  copy.first = slot.first;
  slot = copy;
}

KvCache KvCache::Clone() const {
  KvCache copy(n_layers_, n_kv_heads_, head_dim_, options_);
  copy.next_position_ = next_position_;
  copy.expired_below_ = expired_below_;
  for (size_t i = 0; i < heads_.size(); ++i) {
    const HeadState& src = heads_[i];
    HeadState& dst = copy.heads_[i];
    dst.length = src.length;
    for (const PageSlot& page : src.pages) {
      PageSlot fresh = copy.NewPage(page.first);
      std::memcpy(fresh.page.keys, page.page.keys, pool_->page_bytes);
      fresh.page.rows = page.page.rows;
      dst.pages.push_back(fresh);
    }
  }
  copy.live_entries_ = live_entries_;
  copy.peak_bytes_in_use_ = copy.BytesInUse();
  return copy;
}

KvCache KvCache::Share() const {
  KvCache copy(n_layers_, n_kv_heads_, head_dim_, options_, pool_);
  copy.next_position_ = next_position_;
  copy.expired_below_ = expired_below_;
  copy.heads_ = heads_;
  {
    std::lock_guard lock(pool_->mu);
    for (const HeadState& head : heads_)
      for (const PageSlot& slot : head.pages) ++pool_->refs[static_cast<size_t>(slot.id)];
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
  size_t pages = 0;
  for (const auto& head : heads_) pages += head.pages.size();
  return pages * pool_->page_bytes;
}

size_t KvCache::BytesShared() const {
  size_t pages = 0;
  std::lock_guard lock(pool_->mu);
  for (const auto& head : heads_)
    for (const PageSlot& slot : head.pages) pages += pool_->refs[static_cast<size_t>(slot.id)] > 1;
  return pages * pool_->page_bytes;
}

size_t KvCache::BytesAllocated() const { return pool_->AllocatedBytes(); }

size_t KvCache::PagesNeeded(int extra, std::span<const int> layer_rows, bool alone) const {
  if (extra <= 0) return 0;
  Check(layer_rows.empty() || std::ssize(layer_rows) == n_layers_,
        "KvCache: layer_rows needs one entry per layer");
  const int pt = options_.page_tokens;
  size_t needed = 0;
  std::lock_guard lock(pool_->mu);
  for (int l = 0; l < n_layers_; ++l) {
    // A head that never holds more than `cap` rows holds at most `bound` pages at once: two
    // may be partly empty (its front page after a drop, and the last page of a prefix another
    // cache shares). The pages it alone holds now go back to the pool as it drops them, so it
    // draws at most bound - (those pages) from the pool, or one page before its first drop.
    const int cap = layer_rows.empty() ? 0 : layer_rows[static_cast<size_t>(l)];
    const size_t bound = static_cast<size_t>((cap + pt - 1) / pt + 2);
    for (int h = 0; h < n_kv_heads_; ++h) {
      const HeadState& head = Head(l, h);
      // Room in the last page counts only while no other cache holds it.
      int room = 0;
      if (!head.pages.empty() &&
          (alone || pool_->refs[static_cast<size_t>(head.pages.back().id)] == 1))
        room = pt - head.pages.back().page.rows;
      const size_t pages = extra > room ? static_cast<size_t>((extra - room + pt - 1) / pt) : 0;
      if (cap <= 0) {
        needed += pages;
        continue;
      }
      size_t own = 0;
      for (const PageSlot& slot : head.pages)
        own += alone || pool_->refs[static_cast<size_t>(slot.id)] == 1;
      needed += std::min(pages, std::max<size_t>(bound > own ? bound - own : 0, 1));
    }
  }
  return needed;
}

namespace {

// Pages a pool of `pages` holds once `needed` more are drawn with `free` of them free: it grows
// by whole chunks.
size_t PagesAfterDrawing(size_t pages, size_t free, size_t needed, size_t chunk) {
  return needed > free ? pages + (needed - free + chunk - 1) / chunk * chunk : pages;
}

}  // namespace

size_t KvCache::BytesAllocatedAfterReserve(int extra, std::span<const int> layer_rows) const {
  const size_t needed = PagesNeeded(extra, layer_rows);
  std::lock_guard lock(pool_->mu);
  const size_t pages = pool_->chunks.size() * Pool::kPagesPerChunk;
  return PagesAfterDrawing(pages, pool_->free_list.size(), needed, Pool::kPagesPerChunk) *
         pool_->page_bytes;
}

size_t KvCache::BytesAllocatedAlone(int extra, std::span<const int> layer_rows) const {
  const size_t needed = PagesNeeded(extra, layer_rows, /*alone=*/true);
  const size_t held = BytesReserved() / pool_->page_bytes;
  std::lock_guard lock(pool_->mu);
  const size_t pages = pool_->chunks.size() * Pool::kPagesPerChunk;
  // Every page but this cache's is free once the others are gone.
  return PagesAfterDrawing(pages, pages - held, needed, Pool::kPagesPerChunk) * pool_->page_bytes;
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
    bool own_last = !head.pages.empty() && Exclusive(head.pages.back().id);
    for (int i = 0; i < n; ++i) {
      KvPage& page = AppendTarget(head, own_last).page;
      WriteRow(page, page.rows, k.Row(i) + static_cast<int64_t>(h) * head_dim_,
               v.Row(i) + static_cast<int64_t>(h) * head_dim_, positions[i]);
      ++page.rows;
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
  bool own_last = n > 0 && !head.pages.empty() && Exclusive(head.pages.back().id);
  for (size_t i = 0; i < n; ++i) {
    KvPage& page = AppendTarget(head, own_last).page;
    write(page, page.rows, i);
    page.positions[page.rows] = positions[i];
    ++page.rows;
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

void KvCache::Reserve(int extra, std::span<const int> layer_rows) {
  const int pt = options_.page_tokens;
  const size_t needed = PagesNeeded(extra, layer_rows);
  for (auto& head : heads_)
    head.pages.reserve(head.pages.size() + static_cast<size_t>((std::max(extra, 0) + pt - 1) / pt));
  std::lock_guard lock(pool_->mu);
  while (pool_->free_list.size() < needed) pool_->AddChunkLocked();
  pool_->free_list.reserve(pool_->refs.size());
}

void KvCache::Retain(int layer, int kv_head, std::span<const int32_t> kept_rows) {
  HeadState& head = Head(layer, kv_head);
  const int pt = options_.page_tokens;
  const int n_keep = static_cast<int>(kept_rows.size());
  int prev = -1;
  for (int32_t r : kept_rows) {
    Check(r > prev && r < head.length, "KvCache::Retain: rows must be sorted, unique, in range");
    prev = r;
  }
  // Rows before the first removed one stay where they are, and so do their pages.
  int g = 0;
  while (g < n_keep && kept_rows[static_cast<size_t>(g)] == g) ++g;
  live_entries_ -= head.length - n_keep;
  if (g == n_keep) {
    KeepFirst(head, n_keep);
    return;
  }
  // The rest is packed from row g on, full pages from there; the writer never passes the
  // reader (packed rows take no more room than the rows they came from).
  const int p0 = PageOf(head, g);
  int wp = p0;
  int ws = g - head.pages[static_cast<size_t>(wp)].first;
  int rp = wp;
  int writable = -1;
  for (int i = g; i < n_keep; ++i) {
    const int r = kept_rows[static_cast<size_t>(i)];
    while (r >= head.pages[static_cast<size_t>(rp)].first +
                    head.pages[static_cast<size_t>(rp)].page.rows)
      ++rp;
    if (ws == pt) {
      ++wp;
      ws = 0;
    }
    if (wp != writable) {
      MakeWritable(head, wp);
      writable = wp;
    }
    const PageSlot& from = head.pages[static_cast<size_t>(rp)];
    CopyRow(from.page, r - from.first, head.pages[static_cast<size_t>(wp)].page, ws);
    ++ws;
  }
  // Pages up to wp now hold the rows in order: full, but the last.
  int first = head.pages[static_cast<size_t>(p0)].first;
  for (int p = p0; p <= wp; ++p) {
    PageSlot& slot = head.pages[static_cast<size_t>(p)];
    slot.first = first;
    slot.page.rows = p == wp ? ws : pt;
    first += slot.page.rows;
  }
  head.length = n_keep;
  std::lock_guard lock(pool_->mu);
  while (static_cast<int>(head.pages.size()) > wp + 1) {
    pool_->ReleaseLocked(head.pages.back().id);
    head.pages.pop_back();
  }
}

void KvCache::KeepFirst(HeadState& head, int n) {
  if (n >= head.length) return;
  std::lock_guard lock(pool_->mu);
  while (!head.pages.empty() && head.pages.back().first >= n) {
    pool_->ReleaseLocked(head.pages.back().id);
    head.pages.pop_back();
  }
  if (!head.pages.empty()) head.pages.back().page.rows = n - head.pages.back().first;
  head.length = n;
}

void KvCache::TruncateFrom(int32_t pos) {
  for (auto& head : heads_) {
    int keep = head.length;
    for (auto p = head.pages.rbegin(); p != head.pages.rend(); ++p) {
      int r = p->page.rows;
      while (r > 0 && p->page.positions[r - 1] >= pos) --r;
      keep = p->first + r;
      if (r > 0) break;
    }
    live_entries_ -= head.length - keep;
    KeepFirst(head, keep);
  }
  next_position_ = std::min(next_position_, pos);
}

void KvCache::DropBefore(int layer, int32_t pos) {
  Check(layer >= 0 && layer < n_layers_, "KvCache::DropBefore: layer out of range");
  const size_t row_bytes = KvRowBytes(options_.dtype, head_dim_);
  for (int h = 0; h < n_kv_heads_; ++h) {
    HeadState& head = Head(layer, h);
    // Whole pages go back to the pool; rows are in position order, so they lead the head.
    size_t n_drop = 0;
    while (n_drop < head.pages.size()) {
      const KvPage& page = head.pages[n_drop].page;
      if (page.rows > 0 && page.positions[page.rows - 1] >= pos) break;
      ++n_drop;
    }
    int dropped = n_drop < head.pages.size() ? head.pages[n_drop].first : head.length;
    if (n_drop > 0) {
      {
        std::lock_guard lock(pool_->mu);
        for (size_t i = 0; i < n_drop; ++i) pool_->ReleaseLocked(head.pages[i].id);
      }
      head.pages.erase(head.pages.begin(),
                       head.pages.begin() + static_cast<std::ptrdiff_t>(n_drop));
      for (PageSlot& slot : head.pages) slot.first -= dropped;
    }
    // The page that straddles `pos` moves its live rows to its front (at most page_tokens - 1
    // rows), so the head holds exactly the rows at `pos` and after.
    if (!head.pages.empty()) {
      const KvPage& first = head.pages.front().page;
      const int skip = static_cast<int>(
          std::lower_bound(first.positions, first.positions + first.rows, pos) - first.positions);
      if (skip > 0) {
        MakeWritable(head, 0);
        KvPage& page = head.pages.front().page;
        const size_t keep = static_cast<size_t>(page.rows - skip);
        auto* keys = static_cast<uint8_t*>(page.keys);
        auto* values = static_cast<uint8_t*>(page.values);
        std::memmove(keys, keys + static_cast<size_t>(skip) * row_bytes, keep * row_bytes);
        std::memmove(values, values + static_cast<size_t>(skip) * row_bytes, keep * row_bytes);
        std::memmove(page.positions, page.positions + skip, keep * sizeof(int32_t));
        page.rows -= skip;
        for (size_t i = 1; i < head.pages.size(); ++i) head.pages[i].first -= skip;
        dropped += skip;
      }
    }
    if (dropped == 0) continue;
    head.length -= dropped;
    live_entries_ -= dropped;
    expired_below_ = std::max(expired_below_, pos);
  }
}

void KvCache::ReleaseLayer(int layer) {
  Check(layer >= 0 && layer < n_layers_, "KvCache::ReleaseLayer: layer out of range");
  for (int h = 0; h < n_kv_heads_; ++h) {
    HeadState& head = Head(layer, h);
    live_entries_ -= head.length;
    KeepFirst(head, 0);
  }
}

void KvCache::ShareLayer(const KvCache& from, int layer) {
  Check(from.pool_ == pool_ && from.n_layers_ == n_layers_ && from.n_kv_heads_ == n_kv_heads_,
        "KvCache::ShareLayer: not a cache of this pool and shape");
  Check(&from != this, "KvCache::ShareLayer: a layer shared with itself");
  ReleaseLayer(layer);
  std::lock_guard lock(pool_->mu);
  for (int h = 0; h < n_kv_heads_; ++h) {
    HeadState& head = Head(layer, h);
    head = from.Head(layer, h);
    for (const PageSlot& slot : head.pages) ++pool_->refs[static_cast<size_t>(slot.id)];
    live_entries_ += head.length;
  }
  TrackPeak();
}

void KvCache::Clear() {
  ReleaseAll();
  live_entries_ = 0;
  next_position_ = 0;
  expired_below_ = 0;
}

int KvCache::NumPages(int layer, int kv_head) const {
  return static_cast<int>(Head(layer, kv_head).pages.size());
}

const KvPage& KvCache::Page(int layer, int kv_head, int page) const {
  return Head(layer, kv_head).pages[static_cast<size_t>(page)].page;
}

int32_t KvCache::PositionAt(int layer, int kv_head, int row) const {
  const HeadState& head = Head(layer, kv_head);
  const PageSlot& slot = head.pages[static_cast<size_t>(PageOf(head, row))];
  return slot.page.positions[row - slot.first];
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
  const HeadState& head = Head(layer, kv_head);
  const size_t len = static_cast<size_t>(head.length);
  const size_t d = static_cast<size_t>(head_dim_);
  if (keys) keys->resize(len * d);
  if (values) values->resize(len * d);
  if (positions) positions->resize(len);
  for (const PageSlot& slot : head.pages) {
    const size_t at = static_cast<size_t>(slot.first);
    if (keys) PageKeysToFloat(slot.page, slot.page.rows, keys->data() + at * d);
    if (values) PageValuesToFloat(slot.page, slot.page.rows, values->data() + at * d);
    if (positions)
      std::copy(slot.page.positions, slot.page.positions + slot.page.rows, positions->data() + at);
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
  const HeadState& head = Head(layer, kv_head);
  const size_t row = KvRowBytes(options_.dtype, head_dim_);
  keys->resize(static_cast<size_t>(count) * row);
  values->resize(static_cast<size_t>(count) * row);
  positions->resize(static_cast<size_t>(count));
  if (count == 0) return;
  for (int p = PageOf(head, first), r = first; r < first + count; ++p) {
    const PageSlot& s = head.pages[static_cast<size_t>(p)];
    const int slot = r - s.first;
    const size_t n = static_cast<size_t>(std::min(s.page.rows - slot, first + count - r));
    const size_t at = static_cast<size_t>(r - first);
    std::memcpy(keys->data() + at * row, static_cast<const uint8_t*>(s.page.keys) + slot * row,
                n * row);
    std::memcpy(values->data() + at * row, static_cast<const uint8_t*>(s.page.values) + slot * row,
                n * row);
    std::copy(s.page.positions + slot, s.page.positions + slot + n, positions->data() + at);
    r += static_cast<int>(n);
  }
}

void KvCache::ReadPositions(int layer, int kv_head, std::vector<int32_t>* positions) const {
  ReadHead(layer, kv_head, nullptr, nullptr, positions);
}

}  // namespace primekv
