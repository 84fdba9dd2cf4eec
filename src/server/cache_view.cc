#include "server/cache_view.h"

#include <charconv>
#include <cstdio>

#include "primekv/util/text.h"

namespace primekv::server {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Whether text[i..] is the start of a character whose remaining bytes have not arrived yet.
bool IncompleteCharacter(std::string_view text, size_t i) {
  const auto lead = static_cast<unsigned char>(text[i]);
  const size_t need = lead >= 0xF0 && lead <= 0xF4 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC2 ? 2 : 0;
  if (need == 0 || text.size() - i >= need) return false;
  for (size_t k = i + 1; k < text.size(); ++k)
    if ((static_cast<unsigned char>(text[k]) & 0xC0) != 0x80) return false;
  return true;
}

// JSON writing by hand: the body of a long session is built in a few milliseconds.
void AppendInt(std::string& out, long long v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, r.ptr);
}

void AppendNumber(std::string& out, double v) {
  char buf[32];
  const int n = std::snprintf(buf, sizeof(buf), "%.3f", v);
  std::string_view s(buf, static_cast<size_t>(n));
  while (s.ends_with('0')) s.remove_suffix(1);
  if (s.ends_with('.')) s.remove_suffix(1);
  out.append(s);
}

// `text` is valid UTF-8 (TokenTexts): only quotes, backslashes and control bytes are escaped.
void AppendString(std::string& out, std::string_view text) {
  out += '"';
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
}

// Base64url digits of 5 bits each, lowest first; a digit of 32 or more says another follows.
// Kept masks and token lengths are small numbers: mostly one character each.
constexpr std::string_view kDigits =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

void AppendVarints(std::string& out, std::span<const int> values) {
  out += '"';
  for (int v : values) {
    auto n = static_cast<unsigned>(v);
    while (n >= 32) {
      out += kDigits[32 + (n & 31)];
      n >>= 5;
    }
    out += kDigits[n];
  }
  out += '"';
}

// Length of valid UTF-8 text in UTF-16 code units, as a browser's string counts it.
int Utf16Length(std::string_view text) {
  int n = 0;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if ((u & 0xC0) != 0x80) n += u >= 0xF0 ? 2 : 1;
  }
  return n;
}

template <typename T, typename Each>
void AppendArray(std::string& out, const std::vector<T>& items, Each each) {
  out += '[';
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ',';
    each(items[i]);
  }
  out += ']';
}

void AppendInts(std::string& out, const std::vector<int>& v) {
  AppendArray(out, v, [&](int x) { AppendInt(out, x); });
}

void AppendTurn(std::string& out, const TurnFigures& t) {
  out += "{\"turn\":";
  AppendInt(out, static_cast<long long>(t.turn));
  const std::pair<const char*, long long> ints[] = {
      {"tokens", t.tokens},
      {"prompt_tokens", t.prompt_tokens},
      {"cached_tokens", t.cached_tokens},
      {"completion_tokens", t.completion_tokens},
      {"bytes_full", static_cast<long long>(t.bytes_full)},
      {"bytes_kept", static_cast<long long>(t.bytes_kept)}};
  for (const auto& [name, v] : ints) {
    out += ",\"" + std::string(name) + "\":";
    AppendInt(out, v);
  }
  const std::pair<const char*, double> ms[] = {
      {"prefill_ms", t.prefill_ms}, {"compress_ms", t.compress_ms}, {"decode_ms", t.decode_ms}};
  for (const auto& [name, v] : ms) {
    out += ",\"" + std::string(name) + "\":";
    AppendNumber(out, v);
  }
  out += '}';
}

// "kept", "kept_per_layer" and "bytes".
void AppendKept(std::string& out, const SessionStore::CacheSnapshot& snap) {
  const int n_tokens = static_cast<int>(snap.tokens.size());
  out += ",\"kept\":";
  AppendArray(out, snap.positions,
              [&](const std::vector<int32_t>& p) { AppendVarints(out, KeptRuns(p, n_tokens)); });
  std::vector<int> per_layer(static_cast<size_t>(snap.n_layers), 0);
  size_t entries = 0;
  for (size_t i = 0; i < snap.positions.size(); ++i) {
    per_layer[i / static_cast<size_t>(snap.n_heads)] += static_cast<int>(snap.positions[i].size());
    entries += snap.positions[i].size();
  }
  out += ",\"kept_per_layer\":";
  AppendInts(out, per_layer);
  out += ",\"bytes\":{\"per_entry\":";
  AppendInt(out, static_cast<long long>(snap.bytes_per_entry));
  out += ",\"full\":";
  AppendInt(out, static_cast<long long>(static_cast<size_t>(n_tokens) * snap.positions.size() *
                                        snap.bytes_per_entry));
  out += ",\"kept\":";
  AppendInt(out, static_cast<long long>(entries * snap.bytes_per_entry));
  out += '}';
}

}  // namespace

std::vector<std::string> TokenTexts(const Tokenizer& tokenizer, std::span<const Token> tokens) {
  std::vector<std::string> texts;
  texts.reserve(tokens.size());
  std::string pending;
  for (size_t t = 0; t < tokens.size(); ++t) {
    pending += tokenizer.TokenToPiece(tokens[t]);
    std::string& text = texts.emplace_back();
    const bool last = t + 1 == tokens.size();
    size_t i = 0;
    while (i < pending.size()) {
      if (const size_t n = Utf8SequenceLength(pending, i); n > 0) {
        text.append(pending, i, n);
        i += n;
      } else if (!last && IncompleteCharacter(pending, i)) {
        break;  // the next token may complete it
      } else {
        text += kReplacement;
        ++i;
      }
    }
    pending.erase(0, i);
  }
  return texts;
}

std::vector<int> KeptRuns(std::span<const int32_t> positions, int n_tokens) {
  std::vector<int> runs;  // pairs (removed, kept): the last run is always a kept one
  int at = 0;             // the first position no run covers yet
  for (const int32_t p : positions) {
    if (p < at || p >= n_tokens) continue;  // (ascending and in range in a sound cache)
    if (!runs.empty() && p == at) {
      ++runs.back();
    } else {
      runs.push_back(p - at);
      runs.push_back(1);
    }
    at = p + 1;
  }
  return runs;
}

std::string CacheViewJson(const SessionStore::CacheSnapshot& snap, const Tokenizer& tokenizer) {
  std::string out;
  out.reserve(snap.tokens.size() * 8 + snap.positions.size() * 1024);
  out += "{\"object\":\"primekv.session_cache\",\"session\":";
  AppendString(out, snap.id);
  out += ",\"press\":";
  AppendString(out, snap.press);
  out += ",\"ratio\":";
  AppendNumber(out, snap.schedule.ratio);
  out += ",\"mode\":";
  AppendString(out, ScheduleModeName(snap.schedule.mode));
  out += ",\"n_layers\":";
  AppendInt(out, snap.n_layers);
  out += ",\"n_heads\":";
  AppendInt(out, snap.n_heads);
  out += ",\"n_tokens\":";
  AppendInt(out, static_cast<long long>(snap.tokens.size()));
  // The tokens' texts as one string and each one's length: a 32K-token session's text is
  // about 90 KB, and a JSON string per token would add about 3 bytes to each.
  const std::vector<std::string> texts = TokenTexts(tokenizer, snap.tokens);
  std::string text;
  std::vector<int> lengths;
  lengths.reserve(texts.size());
  for (const std::string& t : texts) {
    text += t;
    lengths.push_back(Utf16Length(t));
  }
  out += ",\"text\":";
  AppendString(out, text);
  out += ",\"token_lengths\":";
  AppendVarints(out, lengths);
  AppendKept(out, snap);
  out += ",\"last_compression\":";
  if (snap.last_before.empty()) {
    out += "null";
  } else {
    out += "{\"before\":";
    AppendInts(out, snap.last_before);
    out += ",\"after\":";
    AppendInts(out, snap.last_after);
    out += '}';
  }
  out += ",\"turns\":";
  AppendArray(out, snap.turns, [&](const TurnFigures& t) { AppendTurn(out, t); });
  out += '}';
  return out;
}

}  // namespace primekv::server
