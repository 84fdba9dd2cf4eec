// libFuzzer target for `primekv serve`'s request bodies (JSON from anyone who can reach the
// port): any bytes must give a validated turn request or a 4xx error that names what is wrong,
// never a crash, an exception, a 5xx or a request the engine would then fail on. The same bytes
// are tried as a path (GET /v1/sessions/{id}/cache), as an Accept-Encoding value, and as token
// ids whose texts the cache view sends, which must join into valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>

#include "primekv/util/text.h"
#include "server/cache_view.h"
#include "server/http.h"
#include "server/request.h"

namespace primekv::server {
namespace {

constexpr int kVocab = 512;
constexpr int kContext = 256;

struct Fixture {
  ServerOptions options;
  Tokenizer tokenizer = std::move(Tokenizer::Create(*MakeSyntheticTokenizerSpec("llama", kVocab)))
                            .value();
};

void CheckOne(const std::string& body, const RequestContext& ctx, bool chat) {
  const Parse parsed = ParseRequest(body, ctx, chat);
  if (const auto* err = std::get_if<HttpError>(&parsed)) {
    Check(err->status >= 400 && err->status < 500, "client input is a 4xx");
    Check(!err->message.empty(), "an error explains itself");
    return;
  }
  const TurnRequest& t = std::get<ParsedRequest>(parsed).turn;
  for (Token id : t.prompt) Check(id >= 0 && id < kVocab, "prompt ids are in the vocabulary");
  Check(t.max_tokens >= 0, "max_tokens is filled in");
  Check(t.ratio >= 0 && t.ratio < 1, "the ratio is in [0, 1)");
  Check(t.sampler.top_p > 0 && t.sampler.top_p <= 1, "top_p is a usable float");
  Check(t.sampler.temperature >= 0 && t.sampler.temperature <= 2, "temperature in [0, 2]");
  Check(t.session_id.empty() || ValidSessionId(t.session_id), "a session id is a valid token");
  Check(t.stop.size() <= 4, "at most 4 stop strings");
}

void CheckCacheView(const std::string& bytes, const Tokenizer& tokenizer) {
  if (const auto id = CacheViewSession(bytes))
    Check(bytes == "/v1/sessions/" + *id + "/cache", "the id is the path's middle");
  (void)AcceptsGzip(bytes);
  std::vector<Token> ids;
  for (const char c : bytes) ids.push_back(static_cast<unsigned char>(c) * 2 % kVocab);
  std::string joined;
  for (const std::string& t : TokenTexts(tokenizer, ids)) joined += t;
  for (size_t i = 0; i < joined.size();) {
    const size_t n = Utf8SequenceLength(joined, i);
    Check(n > 0, "the token texts join into valid UTF-8");
    i += n;
  }
}

}  // namespace
}  // namespace primekv::server

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace primekv::server;
  static const Fixture& f = *new Fixture();
  const RequestContext ctx{.options = f.options,
                           .tokenizer = f.tokenizer,
                           .chat_format = primekv::ChatFormat::kNone,
                           .ctx_size = kContext,
                           .vocab_size = kVocab};
  const std::string body(reinterpret_cast<const char*>(data), size);
  CheckOne(body, ctx, /*chat=*/true);
  CheckOne(body, ctx, /*chat=*/false);
  CheckCacheView(body, f.tokenizer);
  return 0;
}
