// The KV cache: per (layer, KV head) a ragged, compacted list of post-RoPE keys and values with
// the original position of every entry, stored in fixed-size pages drawn from a pool so that
// what compression frees is reused (PagedAttention-style). Caches made by Share() draw from one
// pool and hold common pages by reference count. A page another cache holds is never written
// (compaction copies it first; an append after it starts a page of its own), so no cache ever
// changes what another one reads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "primekv/util/status.h"
#include "primekv/util/tensor.h"

namespace primekv {

// kQ8_0 stores each row in ggml's Q8_0 blocks (32 values as 32 int8 and one fp16 scale: 34
// bytes where f16 takes 64), so head_dim must be a multiple of 32.
enum class KvDType { kF32, kF16, kQ8_0 };
const char* KvDTypeName(KvDType t);
// Bytes of one key (or value) row of head_dim values.
size_t KvRowBytes(KvDType t, int head_dim);
// Whether a cache of this type can hold rows of head_dim values (an error naming both if not).
Status CheckKvDType(KvDType t, int head_dim);

struct KvCacheOptions {
  KvDType dtype = KvDType::kF16;
  int page_tokens = 32;  // entries per page; also the attention kernels' key tile
  // Upper bound on entries per (layer, head); Append fails beyond it. 0 = unlimited.
  int max_tokens_per_head = 0;
};

// One page of one (layer, KV head): up to page_tokens entries.
struct KvPage {
  void* keys = nullptr;          // [page_tokens, head_dim] in the cache dtype
  void* values = nullptr;        // [page_tokens, head_dim]
  int32_t* positions = nullptr;  // [page_tokens]
  int rows = 0;                  // this cache's rows in the page (the first `rows` slots)
};

class KvCache {
 public:
  KvCache(int n_layers, int n_kv_heads, int head_dim, KvCacheOptions options = {});
  KvCache(KvCache&&) noexcept;
  KvCache& operator=(KvCache&&) noexcept;
  ~KvCache();

  // Deep copy into a pool of its own (named, because it is costly).
  KvCache Clone() const;
  // A copy that holds this cache's pages by reference: it costs a page table, not the entries.
  // Neither cache may be changed while Share runs; afterwards each may be changed on its own
  // thread.
  KvCache Share() const;

  int n_layers() const { return n_layers_; }
  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return head_dim_; }
  KvDType dtype() const { return options_.dtype; }
  int page_tokens() const { return options_.page_tokens; }

  int Length(int layer, int kv_head) const;
  int MaxLength() const;  // over all heads
  int64_t TotalEntries() const;
  // Position the next token gets. Compression never changes it.
  int32_t NextPosition() const { return next_position_; }
  void SetNextPosition(int32_t p) { next_position_ = p; }

  // Appends n entries to every KV head of `layer`: k and v are [n, n_kv_heads * head_dim]
  // (post-RoPE), positions [n] strictly above every position already in the layer.
  Status Append(int layer, MatView<const float> k, MatView<const float> v,
                std::span<const int32_t> positions);

  // Appends n entries to one head only (restoring a ragged cache from a file): keys and values
  // [n * head_dim], positions [n] strictly increasing and after the head's last position.
  Status AppendHead(int layer, int kv_head, std::span<const float> keys,
                    std::span<const float> values, std::span<const int32_t> positions);
  // The same with rows as stored in this cache's dtype (ReadHeadRaw's bytes: KvRowBytes each),
  // so a session file restores an f16 or q8_0 cache bit for bit without a float round trip.
  // Rows whose f16 values or q8_0 scales are Inf or NaN are refused (the bytes may come from a
  // file or a store).
  Status AppendHeadRaw(int layer, int kv_head, std::span<const uint8_t> keys,
                       std::span<const uint8_t> values, std::span<const int32_t> positions);
  // Makes room for `extra` more entries in every head without allocating later: the pool gets
  // enough free pages and each head's page table enough capacity (decode loops call this). In a
  // shared pool another cache may take those pages first; an append then allocates.
  // layer_rows: as in BytesAllocatedAfterReserve.
  void Reserve(int extra, std::span<const int> layer_rows = {});

  // Keeps only the entries at the given row indices (sorted ascending, unique) of one head,
  // compacting in place and returning emptied pages to the pool.
  void Retain(int layer, int kv_head, std::span<const int32_t> kept_rows);
  // Drops every entry with position >= pos in all heads (undo of appended turns).
  void TruncateFrom(int32_t pos);
  // Sliding-window layers: drops every entry of `layer` at a position below `pos`. Whole pages
  // go back to the pool; the rows left in the page that straddles `pos` move to its front, so
  // the layer holds exactly its entries at `pos` and after. Remembered in ExpiredBelow().
  void DropBefore(int layer, int32_t pos);
  // Empties one layer, returning its pages to the pool.
  void ReleaseLayer(int layer);
  // Replaces one layer's entries with those of `from`, a cache of this pool and shape (an
  // earlier Share() of this one), whose pages it then holds by reference.
  void ShareLayer(const KvCache& from, int layer);
  // The highest position below which DropBefore has removed entries (0: none removed).
  int32_t ExpiredBelow() const { return expired_below_; }
  // Records that entries below `pos` are gone (a cache read back from a file).
  void NoteExpiredBelow(int32_t pos) { expired_below_ = std::max(expired_below_, pos); }
  void Clear();

  // Page access for kernels: the pages hold the head's rows in order, page.rows each. Pages are
  // full but where a shared prefix ends (rows after a page another cache holds start a new page
  // rather than copy that one) and at the front of a sliding-window layer (DropBefore).
  int NumPages(int layer, int kv_head) const;
  const KvPage& Page(int layer, int kv_head, int page) const;
  int32_t PositionAt(int layer, int kv_head, int row) const;
  // Copies one head's rows as float: keys/values [Length, head_dim]; positions [Length].
  void ReadHead(int layer, int kv_head, std::vector<float>* keys, std::vector<float>* values,
                std::vector<int32_t>* positions) const;
  // Copies one head's rows as stored: keys/values [Length * KvRowBytes]; positions [Length].
  void ReadHeadRaw(int layer, int kv_head, std::vector<uint8_t>* keys, std::vector<uint8_t>* values,
                   std::vector<int32_t>* positions) const;
  // Rows [first, first + count) of one head as stored (a session delta's appended entries).
  void ReadRowsRaw(int layer, int kv_head, int first, int count, std::vector<uint8_t>* keys,
                   std::vector<uint8_t>* values, std::vector<int32_t>* positions) const;
  // One head's positions only, in row order.
  void ReadPositions(int layer, int kv_head, std::vector<int32_t>* positions) const;
  // Converts `count` rows of a page to float (count <= page_tokens).
  void PageKeysToFloat(const KvPage& page, int count, float* out) const;
  void PageValuesToFloat(const KvPage& page, int count, float* out) const;

  // Bytes of the live entries (keys + values + positions), and of the pages this cache holds
  // (shared ones included).
  size_t BytesInUse() const;
  size_t BytesReserved() const;
  // Bytes of this cache's pages that another cache holds too.
  size_t BytesShared() const;
  // Bytes of every page the pool holds, free ones included: what the caches sharing the pool
  // cost in memory together (counted once for all of them).
  size_t BytesAllocated() const;
  // BytesAllocated() after Reserve(extra, layer_rows): what appending `extra` entries per head
  // may cost (a partly filled last page that another cache holds leaves no room in it).
  // layer_rows[l] > 0 (optional, one per layer) says a head of layer l never holds more than
  // that many entries meanwhile (a sliding-window layer that drops as it goes:
  // Model::WindowRows), so it draws at most ceil(layer_rows[l] / page_tokens) + 2 pages, less
  // those it alone holds now (it frees them as it drops).
  size_t BytesAllocatedAfterReserve(int extra, std::span<const int> layer_rows = {}) const;
  // The least BytesAllocatedAfterReserve(extra, layer_rows) can become once every other cache
  // drawing from this pool is gone: the pool keeps its pages (it never shrinks), and this
  // cache's pages are then its alone (no shared page to copy, the others' pages free).
  size_t BytesAllocatedAlone(int extra, std::span<const int> layer_rows = {}) const;
  // How many caches draw from this cache's pool, and a handle naming the pool (for accounting
  // a pool once, however many caches share it; it expires with the pool).
  long PoolUsers() const { return pool_.use_count(); }
  std::weak_ptr<const void> PoolHandle() const { return pool_; }
  size_t PeakBytesInUse() const { return peak_bytes_in_use_; }
  void ResetPeak() { peak_bytes_in_use_ = BytesInUse(); }
  size_t BytesPerEntry() const;  // one key + one value + one position

 private:
  struct Pool;
  struct PageSlot {
    KvPage page;    // the page's memory (chunks never move, so the addresses are stable)
    int id = 0;     // the page in the pool
    int first = 0;  // the head's row in its first slot
  };
  struct HeadState {
    std::vector<PageSlot> pages;
    int length = 0;
  };
  // The page holding `row` of a head.
  int PageOf(const HeadState& head, int row) const;
  // Keeps the first n rows of a head (no row moves).
  void KeepFirst(HeadState& head, int n);
  // Whether no other cache holds the page.
  bool Exclusive(int id) const;
  // The page a head's next row is written to: its last page while this cache alone holds it
  // and it has room (`own_last`), else a new one.
  PageSlot& AppendTarget(HeadState& head, bool& own_last);
  KvCache(int n_layers, int n_kv_heads, int head_dim, KvCacheOptions options,
          std::shared_ptr<Pool> pool);
  // Page `index` of `head` copied first if another cache holds it too.
  void MakeWritable(HeadState& head, int index);
  PageSlot NewPage(int first);
  void ReleaseAll();
  // Pages appending `extra` entries per head needs from the pool (layer_rows: as in
  // BytesAllocatedAfterReserve).
  // alone: as if no other cache held any of this one's pages.
  size_t PagesNeeded(int extra, std::span<const int> layer_rows, bool alone = false) const;
  HeadState& Head(int layer, int kv_head) { return heads_[layer * n_kv_heads_ + kv_head]; }
  const HeadState& Head(int layer, int kv_head) const {
    return heads_[layer * n_kv_heads_ + kv_head];
  }
  void WriteRow(const KvPage& page, int slot, const float* k, const float* v, int32_t pos);
  // The checks of an append of n rows to one head (range, capacity, increasing positions).
  Status CheckHeadAppend(int layer, int kv_head, std::span<const int32_t> positions);
  // Appends n rows to one head, `write(page, slot, i)` filling row i (after CheckHeadAppend).
  template <typename Write>
  void AppendRows(int layer, int kv_head, std::span<const int32_t> positions, Write write);
  void CopyRow(const KvPage& from, int from_slot, const KvPage& to, int to_slot);
  void TrackPeak();
  void RowsToFloat(const void* rows, int count, float* out) const;  // `count` rows of a page

  int n_layers_ = 0;
  int n_kv_heads_ = 0;
  int head_dim_ = 0;
  KvCacheOptions options_;
  int32_t next_position_ = 0;
  int32_t expired_below_ = 0;
  std::vector<HeadState> heads_;  // [n_layers * n_kv_heads]
  std::shared_ptr<Pool> pool_;
  int64_t live_entries_ = 0;
  size_t peak_bytes_in_use_ = 0;
};

}  // namespace primekv
