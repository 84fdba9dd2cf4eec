#include "server/request.h"

#include <climits>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "primekv/press/profile_locator.h"

namespace primekv::server {
namespace {

using nlohmann::json;

// Deeply nested JSON is refused before parsing (recursion in the JSON library's tree).
bool NestingTooDeep(const std::string& body, int limit) {
  int depth = 0;
  bool in_string = false, escape = false;
  for (char c : body) {
    if (in_string) {
      if (escape)
        escape = false;
      else if (c == '\\')
        escape = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

HttpError Bad(const std::string& param, const std::string& why) {
  return HttpError{400, param + ": " + why, param};
}

// temperature, top_k, top_p, seed.
std::optional<HttpError> ParseSampling(const json& j, ParsedRequest& p) {
  float temperature = 1.0f;
  if (j.contains("temperature") && !j["temperature"].is_null()) {
    const json& t = j["temperature"];
    if (!t.is_number() || t.get<double>() < 0 || t.get<double>() > 2)
      return Bad("temperature", "must be a number in [0, 2]");
    temperature = t.get<float>();
  }
  float top_p = 1.0f;
  if (j.contains("top_p") && !j["top_p"].is_null()) {
    const json& t = j["top_p"];
    // Checked as the float the sampler uses: 1e-300 is 0 there.
    if (!t.is_number() || !(t.get<float>() > 0) || t.get<double>() > 1)
      return Bad("top_p", "must be a number in (0, 1] (and above 0 as a float)");
    top_p = t.get<float>();
  }
  // Not an OpenAI field, but sent by clients of other servers (vLLM, llama.cpp): served, not
  // ignored. 0 = the whole vocabulary.
  int top_k = 0;
  if (j.contains("top_k") && !j["top_k"].is_null()) {
    const json& k = j["top_k"];
    if (!k.is_number_integer() || k.get<int64_t>() < 0 || k.get<int64_t>() > INT_MAX ||
        (k.is_number_unsigned() && k.get<uint64_t>() > INT_MAX))
      return Bad("top_k", "must be an integer >= 0 (0 = the whole vocabulary)");
    top_k = static_cast<int>(k.get<int64_t>());
  }
  uint64_t seed = 0;
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!j["seed"].is_number_integer()) return Bad("seed", "must be an integer");
    seed = j["seed"].is_number_unsigned() ? j["seed"].get<uint64_t>()
                                          : static_cast<uint64_t>(j["seed"].get<int64_t>());
  }
  p.turn.sampler = SamplerOptions{temperature, top_k, top_p, seed};
  return std::nullopt;
}

// max_tokens / max_completion_tokens, n, stop.
std::optional<HttpError> ParseLimits(const json& j, const ServerOptions& o, ParsedRequest& p) {
  int64_t max_tokens = o.default_max_tokens;
  bool explicit_max = false;
  const auto given = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  if (given("max_tokens") && given("max_completion_tokens") &&
      j["max_tokens"] != j["max_completion_tokens"])
    return Bad("max_completion_tokens", "differs from max_tokens: send one of them");
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (!given(key)) continue;
    p.turn.max_tokens_param = key;
    const json& m = j[key];
    if (!m.is_number_integer()) return Bad(key, "must be an integer");
    if (m.is_number_unsigned() ? m.get<uint64_t>() > INT_MAX : m.get<int64_t>() > INT_MAX)
      return HttpError{400, std::string(key) + ": exceeds the context", key,
                       "context_length_exceeded"};
    // 0 is an extension: prefill (and compress) the prompt into its session, generate nothing.
    if (m.get<int64_t>() < 0) return Bad(key, "must be >= 0");
    max_tokens = m.get<int64_t>();
    explicit_max = true;
  }
  p.turn.max_tokens = static_cast<int>(max_tokens);
  if (!explicit_max) p.turn.max_tokens = -1;  // filled in by the caller from the context left
  if (j.contains("n") && !j["n"].is_null() && j["n"] != 1) return Bad("n", "only n = 1 is served");
  if (j.contains("stop") && !j["stop"].is_null()) {
    const json& s = j["stop"];
    std::vector<json> items =
        s.is_array() ? std::vector<json>(s.begin(), s.end()) : std::vector<json>{s};
    if (items.size() > 4) return Bad("stop", "at most 4 stop strings");
    for (const json& it : items) {
      if (!it.is_string() || it.get<std::string>().empty() || it.get<std::string>().size() > 256)
        return Bad("stop", "must be a string or an array of non-empty strings (<= 256 bytes)");
      p.turn.stop.push_back(it.get<std::string>());
    }
  }
  return std::nullopt;
}

// stream, stream_options, session.
std::optional<HttpError> ParseStreamAndSession(const json& j, ParsedRequest& p) {
  if (j.contains("stream") && !j["stream"].is_null()) {
    if (!j["stream"].is_boolean()) return Bad("stream", "must be a boolean");
    p.stream = j["stream"].get<bool>();
  }
  if (j.contains("stream_options") && !j["stream_options"].is_null()) {
    const json& so = j["stream_options"];
    if (!so.is_object()) return Bad("stream_options", "must be an object");
    if (so.contains("include_usage")) {
      if (!so["include_usage"].is_boolean())
        return Bad("stream_options.include_usage", "must be a boolean");
      p.include_usage = so["include_usage"].get<bool>();
    }
  }
  if (j.contains("cache_salt") && !j["cache_salt"].is_null()) {
    const json& s = j["cache_salt"];
    if (!s.is_string() || s.get<std::string>().size() > 256)
      return Bad("cache_salt", "must be a string of at most 256 bytes");
    p.turn.cache_salt = s.get<std::string>();
  }
  if (j.contains("session") && !j["session"].is_null()) {
    if (!j["session"].is_string() || !ValidSessionId(j["session"].get<std::string>()))
      return Bad("session", "must be a session id ([A-Za-z0-9_-], 1 to 64 characters)");
    p.turn.session_id = j["session"].get<std::string>();
  }
  return std::nullopt;
}

// The "primekv": {"press", "ratio"} extension over the server's defaults.
std::optional<HttpError> ParsePress(const json& j, const RequestContext& ctx, ParsedRequest& p) {
  p.turn.press = ctx.options.press;
  p.turn.ratio = ctx.options.ratio;
  if (!j.contains("primekv") || j["primekv"].is_null()) return std::nullopt;
  const json& x = j["primekv"];
  if (!x.is_object()) return Bad("primekv", "must be an object {press, ratio}");
  for (const auto& [key, value] : x.items()) {
    if (key == "press") {
      if (!value.is_string()) return Bad("primekv.press", "must be a string");
      p.turn.press = value.get<std::string>();
    } else if (key == "ratio") {
      if (!value.is_number()) return Bad("primekv.ratio", "must be a number");
      p.turn.ratio = value.get<double>();
    } else {
      return Bad("primekv." + key, "unknown field (known: press, ratio)");
    }
  }
  auto served = ServedPress(ctx.options, p.turn.press);
  if (!served.ok()) return Bad("primekv.press", served.message());
  p.turn.press = std::move(served).value();
  if (auto err = CheckServedPress(p.turn.press, p.turn.ratio, "primekv")) {
    err->message = "primekv: " + err->message;
    return err;
  }
  return std::nullopt;
}

// OpenAI fields this server does not implement: a request that uses one is refused, naming it,
// rather than answered as if it had not been sent. Each is accepted at its neutral value.
std::optional<HttpError> RefuseUnsupported(const json& j) {
  const auto used = [&](const char* key) {
    if (!j.contains(key)) return false;
    const json& v = j[key];
    if (v.is_null() || v == false || (v.is_array() && v.empty()) || (v.is_object() && v.empty()))
      return false;
    if (v.is_number() && v.get<double>() == 0) return false;
    return true;
  };
  for (const char* key :
       {"tools", "functions", "logprobs", "top_logprobs", "logit_bias", "presence_penalty",
        "frequency_penalty", "suffix", "audio", "prediction", "modalities"}) {
    if (used(key)) return Bad(key, "is not supported by this server");
  }
  if (j.contains("tool_choice") && !j["tool_choice"].is_null() && j["tool_choice"] != "none" &&
      j["tool_choice"] != "auto")
    return Bad("tool_choice", "is not supported by this server (there are no tools)");
  if (j.contains("function_call") && !j["function_call"].is_null() &&
      j["function_call"] != "none" && j["function_call"] != "auto")
    return Bad("function_call", "is not supported by this server");
  if (j.contains("response_format") && !j["response_format"].is_null()) {
    const json& f = j["response_format"];
    if (!f.is_object() || !f.contains("type") || f["type"] != "text")
      return Bad("response_format", "only {\"type\": \"text\"} is supported");
  }
  if (j.contains("best_of") && !j["best_of"].is_null() && j["best_of"] != 1)
    return Bad("best_of", "only best_of = 1 is served");
  return std::nullopt;
}

// Fields common to chat and completions.
std::optional<HttpError> ParseCommon(const json& j, const RequestContext& ctx, ParsedRequest& p) {
  if (auto err = RefuseUnsupported(j)) return err;
  if (j.contains("model")) {
    if (!j["model"].is_string()) return Bad("model", "must be a string");
    p.model = j["model"].get<std::string>();
  }
  if (auto err = ParseSampling(j, p)) return err;
  if (auto err = ParseLimits(j, ctx.options, p)) return err;
  if (auto err = ParseStreamAndSession(j, p)) return err;
  return ParsePress(j, ctx, p);
}

void FillMaxTokens(ParsedRequest& p, const RequestContext& ctx) {
  if (p.turn.max_tokens >= 0) return;
  const int left = ctx.ctx_size - static_cast<int>(p.turn.prompt.size());
  p.turn.max_tokens = std::max(1, std::min(ctx.options.default_max_tokens, left));
}

Parse ParseChat(const json& j, const RequestContext& ctx) {
  ParsedRequest p;
  if (!j.contains("messages")) return Bad("messages", "is required");
  const json& m = j["messages"];
  if (!m.is_array() || m.empty() || m.size() > 4096)
    return Bad("messages", "must be a non-empty array (at most 4096 messages)");
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string at = "messages[" + std::to_string(i) + "]";
    const json& msg = m[i];
    if (!msg.is_object()) return Bad(at, "must be an object");
    if (!msg.contains("role") || !msg["role"].is_string())
      return Bad(at + ".role", "must be a string");
    std::string role = msg["role"].get<std::string>();
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant")
      return Bad(at + ".role", "must be system, user or assistant");
    if (!msg.contains("content")) return Bad(at + ".content", "is required");
    const json& c = msg["content"];
    std::string text;
    if (c.is_string()) {
      text = c.get<std::string>();
    } else if (c.is_array()) {
      for (const json& part : c) {
        if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
            !part.contains("text") || !part["text"].is_string())
          return Bad(at + ".content", "parts must be {\"type\": \"text\", \"text\": string}");
        text += part["text"].get<std::string>();
      }
    } else {
      return Bad(at + ".content", "must be a string or an array of text parts");
    }
    messages.push_back({role, text});
  }
  if (auto err = ParseCommon(j, ctx, p)) return *err;
  const std::string rendered = ApplyChatTemplate(ctx.chat_format, messages, true);
  p.turn.prompt = ctx.tokenizer.Encode(rendered, true, true);
  FillMaxTokens(p, ctx);
  return p;
}

Parse ParseCompletion(const json& j, const RequestContext& ctx) {
  ParsedRequest p;
  if (!j.contains("prompt")) return Bad("prompt", "is required");
  const json& pr = j["prompt"];
  std::string prompt;
  std::vector<Token> ids;
  const int vocab = ctx.vocab_size;
  if (pr.is_string()) {
    prompt = pr.get<std::string>();
  } else if (pr.is_array() && pr.size() == 1 && pr[0].is_string()) {
    prompt = pr[0].get<std::string>();
  } else if (pr.is_array() && !pr.empty() && pr[0].is_number()) {
    // Token ids, taken as they are (no BOS added), as the OpenAI API allows.
    for (const json& t : pr) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
        return Bad("prompt", "token ids must be integers in [0, " + std::to_string(vocab) + ")");
      ids.push_back(static_cast<Token>(t.get<int64_t>()));
    }
  } else {
    return Bad("prompt", "must be a string, an array of one string, or an array of token ids");
  }
  if (j.contains("echo") && j["echo"] == true) return Bad("echo", "is not supported");
  if (auto err = ParseCommon(j, ctx, p)) return *err;
  p.turn.prompt = ids.empty() ? ctx.tokenizer.Encode(prompt, true, false) : ids;
  FillMaxTokens(p, ctx);
  return p;
}

}  // namespace

Parse ParseRequest(const std::string& body, const RequestContext& ctx, bool chat) {
  if (NestingTooDeep(body, 64)) return Bad("body", "JSON nested too deeply");
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) return Bad("body", "malformed JSON");
  if (!j.is_object()) return Bad("body", "must be a JSON object");
  try {
    return chat ? ParseChat(j, ctx) : ParseCompletion(j, ctx);
  } catch (const json::exception& e) {
    // Every field is type-checked before it is read; this is the net under that rule.
    return Bad("body", std::string("unexpected value: ") + e.what());
  }
}

std::optional<std::string> CacheViewSession(std::string_view path) {
  constexpr std::string_view kSessions = "/v1/sessions/", kCache = "/cache";
  if (!path.starts_with(kSessions) || !path.ends_with(kCache) ||
      path.size() <= kSessions.size() + kCache.size())
    return std::nullopt;
  return std::string(path.substr(kSessions.size(), path.size() - kSessions.size() - kCache.size()));
}

Result<std::string> ServedPress(const ServerOptions& options, const std::string& press) {
  if (!options.auto_profile.empty())
    return SubstituteAutoProfile(press, std::filesystem::path(options.auto_profile));
  return SubstituteAutoProfile(
      press,
      Status::Error("profile=auto: the server found no profile beside " + options.model_path +
                    " at start (the cached one is looked up only "
                    "when --press asks for profile=auto); make one with: primekv "
                    "calibrate -m " +
                    options.model_path));
}

std::optional<HttpError> CheckServedPress(const std::string& press, double ratio,
                                          const std::string& param) {
  auto spec = ParsePressSpec(press);
  if (!spec.ok()) return HttpError{400, spec.message(), param};
  auto made = MakePress(*spec);
  if (!made.ok()) return HttpError{400, made.message(), param};
  if (!(ratio >= 0 && ratio < 1)) return HttpError{400, "ratio must be in [0, 1)", param};
  if (Status usable = CheckPipelinePress(*made); !usable.ok())
    return HttpError{400, usable.message(), param};
  // A multi-turn session compresses after each request (decode mode: every --interval tokens);
  // a pass over the whole context each time is not what KVzip is for, and its scores cover only
  // the context the pass repeated. The press is refused under every --mode, context included.
  if (made->scorer && made->scorer->Needs().reconstruction)
    return HttpError{400,
                     "press " + made->name +
                         " is not served (it runs in primekv generate, eval "
                         "and fidelity)",
                     param};
  return std::nullopt;
}

}  // namespace primekv::server
