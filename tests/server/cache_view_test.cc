// The body of GET /v1/sessions/{id}/cache (server/cache_view.h): token texts that are valid
// UTF-8 whatever the byte tokens split, kept masks as run lengths, the compact number lists, and
// the size bound of a 32K-token session of primekv-long's shape (8 layers x 2 KV heads) at
// ratio 0.9 with its kept entries scattered at random, more runs than a real press leaves.
#include "server/cache_view.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>

#include "primekv/model/model.h"
#include "primekv/util/text.h"
#include "server/http.h"

namespace primekv::server {
namespace {

const char kModel[] = PRIMEKV_SOURCE_DIR "/models/primekv-retrieval.gguf";
const char kDemo[] = PRIMEKV_SOURCE_DIR "/examples/demo-context.txt";

// The page's decoding of the number lists, in C++ (app.js `varints`).
std::vector<int> Varints(const std::string& s) {
  const std::string digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::vector<int> out;
  int n = 0, shift = 0;
  for (const char c : s) {
    const int d = static_cast<int>(digits.find(c));
    EXPECT_GE(d, 0) << "not a digit: " << c;
    if (d >= 32) {
      n += (d - 32) << shift;
      shift += 5;
    } else {
      out.push_back(n + (d << shift));
      n = shift = 0;
    }
  }
  EXPECT_EQ(shift, 0) << "a number is cut off";
  return out;
}

std::vector<int32_t> Positions(const std::vector<int>& runs) {
  std::vector<int32_t> kept;
  int at = 0;
  for (size_t i = 0; i + 1 < runs.size(); i += 2) {
    at += runs[i];
    for (int k = 0; k < runs[i + 1]; ++k) kept.push_back(at++);
  }
  return kept;
}

const Model& ReferenceModel() {
  static const Model model = [] {
    auto m = Model::Load(kModel);
    Check(m.ok(), m.ok() ? "" : m.message().c_str());
    return std::move(m).value();
  }();
  return model;
}

TEST(CacheView, KeptRunsAlternateRemovedAndKept) {
  EXPECT_EQ(KeptRuns(std::vector<int32_t>{}, 10), std::vector<int>{});
  EXPECT_EQ(KeptRuns(std::vector<int32_t>{0, 1, 2}, 10), (std::vector<int>{0, 3}));
  EXPECT_EQ(KeptRuns(std::vector<int32_t>{3, 4, 7, 9}, 10), (std::vector<int>{3, 2, 2, 1, 1, 1}));
  // Positions outside the session's tokens are not drawn.
  EXPECT_EQ(KeptRuns(std::vector<int32_t>{1, 12}, 10), (std::vector<int>{1, 1}));
}

TEST(CacheView, TokenTextsAreWholeCharacters) {
  const Tokenizer& tok = ReferenceModel().tokenizer();
  // "é" (C3 A9) and "€" (E2 82 AC) split into byte tokens: each character goes to the token
  // that completes it.
  const std::string text = "caf\xC3\xA9 \xE2\x82\xAC 5";
  const std::vector<Token> ids = tok.Encode(text, false);
  const std::vector<std::string> texts = TokenTexts(tok, ids);
  ASSERT_EQ(texts.size(), ids.size());
  std::string joined;
  for (const std::string& t : texts) {
    EXPECT_TRUE(t.empty() || Utf8SequenceLength(t, 0) > 0) << "piece starts mid-character";
    joined += t;
  }
  EXPECT_EQ(joined, tok.Decode(ids, false));
  // A byte that no character can hold becomes U+FFFD, and so does one left unfinished.
  const Token lone = tok.FindToken("<0xA9>"), lead = tok.FindToken("<0xE2>");
  ASSERT_GE(lone, 0);
  ASSERT_GE(lead, 0);
  EXPECT_EQ(TokenTexts(tok, std::vector<Token>{lone}), std::vector<std::string>{"\xEF\xBF\xBD"});
  EXPECT_EQ(TokenTexts(tok, std::vector<Token>{lead}), std::vector<std::string>{"\xEF\xBF\xBD"});
}

// A session of `n` tokens of the demo document over primekv-long's cache shape, each head
// keeping a random tenth of the positions.
SessionStore::CacheSnapshot LongSnapshot(const Tokenizer& tok, int n) {
  std::ifstream in(kDemo);
  std::stringstream doc;
  doc << in.rdbuf();
  const std::vector<Token> once = tok.Encode(doc.str(), false);
  SessionStore::CacheSnapshot snap{.id = "s0", .press = "primekv", .n_layers = 8, .n_heads = 2};
  snap.schedule.ratio = 0.9;
  while (static_cast<int>(snap.tokens.size()) < n)
    snap.tokens.insert(snap.tokens.end(), once.begin(), once.end());
  snap.tokens.resize(static_cast<size_t>(n));
  snap.bytes_per_entry = 516;
  std::mt19937 rng(7);
  for (int head = 0; head < 16; ++head) {
    std::vector<int32_t> all(static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) all[static_cast<size_t>(p)] = p;
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(static_cast<size_t>(n / 10));
    std::sort(all.begin(), all.end());
    snap.positions.push_back(std::move(all));
  }
  return snap;
}

TEST(CacheView, LongSessionIsBoundedAndRoundTrips) {
  const Tokenizer& tok = ReferenceModel().tokenizer();
  const int n = 32768;
  const SessionStore::CacheSnapshot snap = LongSnapshot(tok, n);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string body = CacheViewJson(snap, tok);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("32K tokens, 16 heads, random tenth kept: %zu bytes, built in %.1f ms\n", body.size(),
              ms);
  EXPECT_LT(body.size(), size_t{256} * 1000);
  const auto j = nlohmann::json::parse(body);
  EXPECT_EQ(j["n_tokens"], n);
  ASSERT_EQ(j["kept"].size(), 16u);
  for (size_t head = 0; head < 16; ++head)
    EXPECT_EQ(Positions(Varints(j["kept"][head].get<std::string>())), snap.positions[head]);
  EXPECT_EQ(j["kept_per_layer"][0], 2 * (n / 10));
  // The token lengths cut the text back into each token's text (ASCII here: bytes = units).
  const std::vector<int> lengths = Varints(j["token_lengths"].get<std::string>());
  ASSERT_EQ(lengths.size(), static_cast<size_t>(n));
  const std::vector<std::string> texts = TokenTexts(tok, snap.tokens);
  const std::string text = j["text"].get<std::string>();
  size_t at = 0;
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(text.substr(at, static_cast<size_t>(lengths[i])), texts[i]) << "token " << i;
    at += static_cast<size_t>(lengths[i]);
  }
  EXPECT_EQ(at, text.size());
  EXPECT_EQ(j["bytes"]["full"], static_cast<int64_t>(n) * 16 * 516);
  EXPECT_EQ(j["bytes"]["kept"], static_cast<int64_t>(n / 10) * 16 * 516);
}

// Browsers send Accept-Encoding: gzip; the body is then sent gzipped (a 32K-token session's
// 183 KiB as 59 KiB).
TEST(CacheView, GzipOnlyWhenAccepted) {
  EXPECT_TRUE(AcceptsGzip("gzip, deflate, br"));
  EXPECT_TRUE(AcceptsGzip("br;q=1.0, GZIP; q=0.5"));
  EXPECT_FALSE(AcceptsGzip(""));
  EXPECT_FALSE(AcceptsGzip("identity"));
  EXPECT_FALSE(AcceptsGzip("gzip;q=0"));
  EXPECT_FALSE(AcceptsGzip("deflate, gzip;q=0.000"));
  EXPECT_FALSE(AcceptsGzip("x-gzip2"));
  const std::string body(100000, 'a');
  const std::string gz = GzipBody(body);
  ASSERT_GT(gz.size(), 18u);
  EXPECT_LT(gz.size(), 1000u);
  EXPECT_EQ(static_cast<unsigned char>(gz[0]), 0x1f);  // gzip's magic
  EXPECT_EQ(static_cast<unsigned char>(gz[1]), 0x8b);
}

}  // namespace
}  // namespace primekv::server
