// libFuzzer target for session files (session/session_file.h): the bytes a Redis store hands
// back, or a --session-dir holds, read against a small model. ParseSessionImage returns a record
// whose tokens, cache shape and positions agree with the model, or an error; it never crashes.
// Inputs whose first byte is odd are wrapped in a valid envelope (magic, version 1 or 2 by the
// first byte's second bit, size and the payload's checksum), so the fuzzer reaches the header and
// cache readers behind the checksum.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>

#include "primekv/model/random_model.h"
#include "primekv/session/session_file.h"

namespace {

const primekv::Model& TheModel() {
  static const primekv::Model* model = [] {
    primekv::RandomModelSpec spec;
    spec.n_layers = 2;
    spec.d_model = 64;
    spec.n_heads = 2;
    spec.n_kv_heads = 2;
    spec.head_dim = 32;
    spec.d_ff = 128;
    spec.vocab_size = 512;
    const auto path = std::filesystem::temp_directory_path() /
                      ("session_file_fuzz_" + std::to_string(::getpid()) + ".gguf");
    primekv::Check(primekv::WriteRandomModel(spec, path).ok(), "fuzz model written");
    auto loaded = primekv::Model::Load(path);
    std::filesystem::remove(path);
    primekv::Check(loaded.ok(), "fuzz model loaded");
    return new primekv::Model(std::move(loaded).value());
  }();
  return *model;
}

// The envelope the session file format puts around a payload (FNV-1a 64 of the payload).
std::string Envelope(std::string_view payload, uint32_t version) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : payload) {
    h ^= c;
    h *= 1099511628211ull;
  }
  const uint64_t size = payload.size();
  std::string out("PKVSESS1", 8);
  out.append(reinterpret_cast<const char*>(&version), 4);
  out.append(reinterpret_cast<const char*>(&size), 8);
  out.append(payload);
  out.append(reinterpret_cast<const char*>(&h), 8);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string image =
      (data[0] & 1) != 0 ? Envelope(rest, (data[0] & 2) != 0 ? 2 : 1) : std::string(rest);
  const primekv::Model& model = TheModel();
  auto r = primekv::ParseSessionImage(image, model, {});
  if (!r.ok()) {
    primekv::Check(!r.message().empty(), "a refusal says why");
    return 0;
  }
  const primekv::ConversationRecord& rec = *r;
  primekv::Check(rec.cache.has_value(), "a full read has a cache");
  primekv::Check(rec.cache->NextPosition() == static_cast<int32_t>(rec.tokens.size()),
                 "positions match the tokens");
  primekv::Check(rec.cache->n_layers() == model.config().n_layers, "the model's layers");
  primekv::Check(primekv::ValidSessionId(rec.id), "a valid id");
  for (primekv::Token t : rec.tokens)
    primekv::Check(t >= 0 && t < model.config().vocab_size, "tokens in the vocabulary");
  return 0;
}
