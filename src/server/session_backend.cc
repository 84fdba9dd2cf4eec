// The session store backends' common counters, and the directory backend (--session-dir).
#include "server/session_backend.h"

#include <filesystem>
#include <string>

namespace primekv::server {

StoreStats SessionBackend::stats() const {
  std::lock_guard lock(stats_mu_);
  return stats_;
}

void SessionBackend::CountLoad(const Result<Loaded>& r, std::chrono::steady_clock::time_point t0,
                               size_t bytes) {
  std::lock_guard lock(stats_mu_);
  stats_.load_seconds += SecondsSince(t0);
  if (!r.ok()) {
    ++stats_.errors;
  } else if (r->found == Found::kFound) {
    ++stats_.loads;
    stats_.bytes_loaded += bytes;
  } else if (r->found == Found::kMissing) {
    ++stats_.misses;
  } else {
    ++stats_.rejected;
  }
}

void SessionBackend::CountSave(const Result<Saved>& r, std::chrono::steady_clock::time_point t0,
                               size_t bytes) {
  std::lock_guard lock(stats_mu_);
  stats_.save_seconds += SecondsSince(t0);
  if (!r.ok()) {
    ++stats_.errors;
  } else if (*r == Saved::kSaved) {
    ++stats_.saves;
    stats_.bytes_saved += bytes;
  } else if (*r == Saved::kStale) {
    ++stats_.stale_saves;
  } else {
    ++stats_.too_large;
  }
}

void SessionBackend::CountPrefixHit() {
  std::lock_guard lock(stats_mu_);
  ++stats_.prefix_hits;
}

void SessionBackend::CountError() {
  std::lock_guard lock(stats_mu_);
  ++stats_.errors;
}

namespace {

class DirBackend final : public SessionBackend {
 public:
  DirBackend(std::string dir, const Model& model, const KvCacheOptions& kv)
      : dir_(std::move(dir)), model_(model), kv_(kv) {}
  const char* name() const override { return "dir"; }
  std::string where(const std::string& id) const override { return dir_ + "/" + id + ".pkvs"; }
  bool shared() const override { return false; }

  Result<Saved> Save(Conversation& conv) override {
    const auto t0 = std::chrono::steady_clock::now();
    // One replica writes its own directory: nothing can be newer than its own last turn.
    Result<Saved> r = Saved::kSaved;
    const uint64_t before = conv.stored() ? conv.stored()->extent.bytes : 0;
    if (Status st = conv.Save(dir_); !st.ok()) r = st;
    // The bytes this save wrote: a delta's, or the whole image's.
    const auto& e = conv.stored();
    const uint64_t written =
        !e ? 0 : (e->extent.deltas > 0 ? e->extent.bytes - before : e->extent.bytes);
    CountSave(r, t0, static_cast<size_t>(written));
    return r;
  }

  Result<Loaded> Load(const std::string& tenant, const std::string& id) override {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string path = dir_ + "/" + id + ".pkvs";
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    Loaded out;
    if (ec) {
      out.found = Found::kMissing;
    } else if (auto snap = ReadSessionFile(path, model_, kv_, false, &out.extent); !snap.ok()) {
      out.found = Found::kDamaged;
      out.why = snap.message();
    } else if (snap->tenant != tenant) {
      out.found = Found::kDamaged;
      out.why = "session file '" + path + "' belongs to another tenant";
    } else {
      out.found = Found::kFound;
      out.snapshot = std::move(snap).value();
    }
    Result<Loaded> r = std::move(out);
    CountLoad(r, t0, ec ? 0 : static_cast<size_t>(size));
    return r;
  }

  Result<std::optional<uint64_t>> StoredTurn(const std::string&, const std::string&) override {
    return std::optional<uint64_t>();
  }

 private:
  std::string dir_;
  const Model& model_;
  KvCacheOptions kv_;
};

}  // namespace

std::unique_ptr<SessionBackend> MakeDirBackend(std::string dir, const Model& model,
                                               const KvCacheOptions& kv) {
  return std::make_unique<DirBackend>(std::move(dir), model, kv);
}

}  // namespace primekv::server
