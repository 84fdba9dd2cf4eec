#include "primekv/kv/retention.h"

#include <algorithm>
#include <utility>

namespace primekv {

KvRetention::KvRetention(std::vector<int> layer_windows) : windows_(std::move(layer_windows)) {
  windowed_ = std::any_of(windows_.begin(), windows_.end(), [](int w) { return w > 0; });
}

bool KvRetention::WindowedLayer(int layer) const { return Window(layer) > 0; }

int KvRetention::Window(int layer) const {
  return layer >= 0 && layer < std::ssize(windows_) ? windows_[static_cast<size_t>(layer)] : 0;
}

int32_t KvRetention::FirstVisible(int64_t query, int window) {
  // A key at k is visible from q while k > q - window.
  return static_cast<int32_t>(std::max<int64_t>(0, query + 1 - window));
}

void KvRetention::DropExpired(KvCache& cache) const {
  for (int l = 0; l < std::ssize(windows_); ++l) {
    const int w = windows_[static_cast<size_t>(l)];
    if (w <= 0) continue;
    const int32_t first = FirstVisible(cache.NextPosition(), w);
    if (first > 0) cache.DropBefore(l, first);
  }
}

bool KvRetention::Reaches(const KvCache& cache, int64_t n) const {
  for (int w : windows_)
    if (w > 0 && cache.ExpiredBelow() > FirstVisible(n, w)) return false;
  return true;
}

void KvRetention::NoteHeld(KvCache& cache) const {
  int32_t first = 0;
  for (int l = 0; l < std::ssize(windows_); ++l) {
    if (windows_[static_cast<size_t>(l)] <= 0) continue;
    for (int h = 0; h < cache.n_kv_heads(); ++h)
      if (cache.Length(l, h) > 0) first = std::max(first, cache.PositionAt(l, h, 0));
  }
  cache.NoteExpiredBelow(first);
}

std::vector<int> KvRetention::TurnRows(int page_tokens) const {
  if (!windowed_) return {};
  std::vector<int> rows(windows_.size(), 0);
  for (size_t l = 0; l < windows_.size(); ++l)
    if (windows_[l] > 0) rows[l] = windows_[l] - 1 + page_tokens;
  return rows;
}

KvCache KvRetention::WindowedShare(const KvCache& cache) const {
  KvCache point = cache.Share();
  for (int l = 0; l < std::ssize(windows_); ++l)
    if (windows_[static_cast<size_t>(l)] <= 0) point.ReleaseLayer(l);
  return point;
}

void KvRetention::RestoreWindowed(KvCache& cache, const KvCache& point) const {
  for (int l = 0; l < std::ssize(windows_); ++l)
    if (windows_[static_cast<size_t>(l)] > 0) cache.ShareLayer(point, l);
}

}  // namespace primekv
