// libFuzzer target for session files (session/session_file.h): the bytes a Redis store hands
// back, or a --session-dir holds, read against a small model. ParseSessionImage returns a record
// whose tokens, cache shape and positions agree with the model, or an error; it never crashes.
// Inputs whose first byte is odd are wrapped in a valid envelope (magic, version 1 or 2 by the
// first byte's second bit, size and the payload's checksum), so the fuzzer reaches the header and
// cache readers behind the checksum. With the first byte's third bit set too, the input is a u32
// base length, a base payload and a delta payload: the base gets version 3's envelope and the
// delta its own, with the base's checksum written where the delta's header says "after":0, so
// the delta reader is reached behind both checksums.
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

uint64_t Fnv1a(std::string_view bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// The envelope the session file format puts around a payload (FNV-1a 64 of the payload); a
// delta's has its own magic and no version.
std::string Envelope(std::string_view payload, uint32_t version, bool delta = false) {
  const uint64_t h = Fnv1a(payload);
  const uint64_t size = payload.size();
  std::string out(delta ? "PKVDELT1" : "PKVSESS1", 8);
  if (!delta) out.append(reinterpret_cast<const char*>(&version), 4);
  out.append(reinterpret_cast<const char*>(&size), 8);
  out.append(payload);
  out.append(reinterpret_cast<const char*>(&h), 8);
  return out;
}

// A base and a delta that follows it (see the top of the file).
std::string WithDelta(std::string_view rest) {
  uint32_t base_len = 0;
  if (rest.size() < 4) return std::string(rest);
  std::memcpy(&base_len, rest.data(), 4);
  rest.remove_prefix(4);
  if (base_len > rest.size()) return std::string(rest);
  const std::string_view base = rest.substr(0, base_len);
  std::string delta(rest.substr(base_len));
  const std::string placeholder = "\"after\":0";
  if (const size_t at = delta.find(placeholder); at != std::string::npos && delta.size() >= 4) {
    const std::string sum = "\"after\":" + std::to_string(Fnv1a(base));
    delta.replace(at, placeholder.size(), sum);
    uint32_t header_len = 0;  // the header grew by the digits: its length too
    std::memcpy(&header_len, delta.data(), 4);
    header_len += static_cast<uint32_t>(sum.size() - placeholder.size());
    std::memcpy(delta.data(), &header_len, 4);
  }
  return Envelope(base, 3) + Envelope(delta, 0, true);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string image;
  if ((data[0] & 5) == 5) {
    image = WithDelta(rest);
  } else if ((data[0] & 1) != 0) {
    image = Envelope(rest, (data[0] & 2) != 0 ? 2 : 1);
  } else {
    image = std::string(rest);
  }
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
