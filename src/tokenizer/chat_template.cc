// Chat templates: recognising a GGUF's tokenizer.chat_template as one of the families the
// engine renders, and rendering each family exactly as its Jinja template does (checked against
// transformers.js renderings in tests/tokenizer/data/chat.json).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "primekv/tokenizer/tokenizer.h"
#include "primekv/util/text.h"

namespace primekv {
namespace {

struct NamedFormat {
  std::string_view name;
  ChatFormat format;
};
constexpr std::array<NamedFormat, 13> kFormatNames = {{
    {"llama3", ChatFormat::kLlama3},
    {"llama3.1", ChatFormat::kLlama31},
    {"chatml", ChatFormat::kChatML},
    {"qwen2", ChatFormat::kQwen2},
    {"qwen3", ChatFormat::kQwen3},
    {"mistral-v0.3", ChatFormat::kMistral},
    {"llama2", ChatFormat::kLlama2},
    {"gemma", ChatFormat::kGemma},
    {"phi3", ChatFormat::kPhi3},
    {"granite", ChatFormat::kGranite},
    {"mistral-nemo", ChatFormat::kMistralNemo},
    {"none", ChatFormat::kNone},
    {"mistral", ChatFormat::kMistral},  // alias, listed last so names map back to the first
}};

bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

// JavaScript's String.prototype.trim set (WhiteSpace + LineTerminator), which is what the
// reference Jinja engine's trim filter and str.strip() remove.
bool IsJsSpaceAt(std::string_view s, size_t pos, size_t& len) {
  const auto b = static_cast<unsigned char>(s[pos]);
  len = 1;
  if (b == ' ' || (b >= '\t' && b <= '\r')) return true;
  auto is = [&](std::string_view seq) {
    if (s.substr(pos, seq.size()) != seq) return false;
    len = seq.size();
    return true;
  };
  if (b == 0xC2) return is("\xC2\xA0");
  if (b == 0xE1) return is("\xE1\x9A\x80");
  if (b == 0xE2) {
    if (s.size() - pos >= 3 && static_cast<unsigned char>(s[pos + 1]) == 0x80) {
      const auto c = static_cast<unsigned char>(s[pos + 2]);
      if ((c >= 0x80 && c <= 0x8A) || c == 0xA8 || c == 0xA9 || c == 0xAF) {
        len = 3;
        return true;
      }
    }
    return is("\xE2\x81\x9F");
  }
  if (b == 0xE3) return is("\xE3\x80\x80");
  if (b == 0xEF) return is("\xEF\xBB\xBF");
  return false;
}

std::string_view TrimLeft(std::string_view s) {
  size_t len = 0;
  while (!s.empty() && IsJsSpaceAt(s, 0, len)) s.remove_prefix(len);
  return s;
}

std::string_view Trim(std::string_view s) {
  s = TrimLeft(s);
  // Scan forward to find where the trailing whitespace run starts (UTF-8 is not reversible).
  size_t end = 0, len = 0;
  for (size_t pos = 0; pos < s.size();) {
    if (IsJsSpaceAt(s, pos, len)) {
      pos += len;
    } else {
      ++pos;
      end = pos;
    }
  }
  return s.substr(0, end);
}

std::string_view StripChar(std::string_view s, char c, bool left, bool right) {
  while (left && !s.empty() && s.front() == c) s.remove_prefix(1);
  while (right && !s.empty() && s.back() == c) s.remove_suffix(1);
  return s;
}

std::string RenderLlama3(std::span<const ChatMessage> msgs, const ChatRenderOptions& o) {
  std::string out;
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (i == 0) out += o.bos_token;
    out += "<|start_header_id|>" + msgs[i].role + "<|end_header_id|>\n\n";
    out += Trim(msgs[i].content);
    out += "<|eot_id|>";
  }
  if (o.add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// A leading system message, taken off `msgs`.
std::optional<std::string_view> TakeSystem(std::span<const ChatMessage>& msgs) {
  if (msgs.empty() || msgs[0].role != "system") return std::nullopt;
  const std::string_view system = msgs[0].content;
  msgs = msgs.subspan(1);
  return system;
}

// Llama 3.1 without tools: a system block with the dates (and the system message, if any),
// then every turn as in Llama 3. Tool-call and ipython turns are left out.
std::string RenderLlama31(std::span<const ChatMessage> msgs, const ChatRenderOptions& o) {
  std::string out = o.bos_token;
  const std::string_view system = Trim(TakeSystem(msgs).value_or(""));
  out += "<|start_header_id|>system<|end_header_id|>\n\n";
  out += "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
  out += system;
  out += "<|eot_id|>";
  for (const ChatMessage& m : msgs) {
    if (m.role == "ipython" || m.role == "tool") continue;
    out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
    out += Trim(m.content);
    out += "<|eot_id|>";
  }
  if (o.add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

std::string RenderChatML(std::span<const ChatMessage> msgs, const ChatRenderOptions& o,
                         std::string_view default_system) {
  std::string out;
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (i == 0 && !default_system.empty() && msgs[0].role != "system") {
      out += "<|im_start|>system\n" + std::string(default_system) + "<|im_end|>\n";
    }
    out += "<|im_start|>" + msgs[i].role + "\n" + msgs[i].content + "<|im_end|>\n";
  }
  if (o.add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

bool IsToolResponse(std::string_view c) {
  return c.starts_with("<tool_response>") && c.ends_with("</tool_response>");
}

std::string RenderQwen3(std::span<const ChatMessage> msgs, const ChatRenderOptions& o) {
  std::string out;
  if (!msgs.empty() && msgs[0].role == "system") {
    out += "<|im_start|>system\n" + msgs[0].content + "<|im_end|>\n";
  }
  // The last user turn that is not a tool response: assistant turns after it keep their
  // reasoning, earlier ones lose it.
  size_t last_query = msgs.empty() ? 0 : msgs.size() - 1;
  for (size_t k = msgs.size(); k-- > 0;) {
    if (msgs[k].role == "user" && !IsToolResponse(msgs[k].content)) {
      last_query = k;
      break;
    }
  }
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role == "user" || (m.role == "system" && i != 0)) {
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    } else if (m.role == "assistant") {
      std::string_view content = m.content, reasoning;
      const size_t end_think = m.content.find("</think>");
      if (end_think != std::string::npos) {
        const std::string_view all = m.content;
        content = StripChar(all.substr(all.rfind("</think>") + 8), '\n', true, false);
        std::string_view before = StripChar(all.substr(0, end_think), '\n', false, true);
        const size_t open = before.rfind("<think>");
        if (open != std::string_view::npos) before = before.substr(open + 7);
        reasoning = StripChar(before, '\n', true, false);
      }
      out += "<|im_start|>" + m.role + "\n";
      if (i > last_query && (i + 1 == msgs.size() || !reasoning.empty())) {
        out += "<think>\n";
        out += StripChar(reasoning, '\n', true, true);
        out += "\n</think>\n\n";
        out += StripChar(content, '\n', true, false);
      } else {
        out += content;
      }
      out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      if (i == 0 || msgs[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
      if (i + 1 == msgs.size() || msgs[i + 1].role != "tool") out += "<|im_end|>\n";
    }
  }
  if (o.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (o.enable_thinking.has_value() && !*o.enable_thinking) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

// Mistral v0.3 ("v3"), and with `tekken` Mistral Nemo ("v3-tekken"), without tools: the system
// message joins the last user turn. Tekken writes no spaces around the instructions and leaves
// the assistant's text untrimmed. Neither template writes a generation prompt.
Result<std::string> RenderMistral(std::span<const ChatMessage> msgs, const ChatRenderOptions& o,
                                  bool tekken) {
  const std::optional<std::string_view> system = TakeSystem(msgs);
  for (size_t i = 0; i < msgs.size(); ++i) {
    if ((msgs[i].role == "user") != (i % 2 == 0)) {
      return Status::Error(
          "After the optional system message, conversation roles must alternate "
          "user/assistant/user/assistant/...");
    }
  }
  std::string out = o.bos_token;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role == "user") {
      out += tekken ? "[INST]" : "[INST] ";
      if (i + 1 == msgs.size() && system) out += std::string(*system) + "\n\n";
      out += m.content + "[/INST]";
    } else if (m.role == "assistant") {
      if (tekken) {
        out += m.content;
      } else {
        out += " ";
        out += Trim(m.content);
      }
      out += o.eos_token;
    } else {
      return Status::Error(
          "Only user and assistant roles are supported, with the exception of an initial "
          "optional system message!");
    }
  }
  return out;
}

Result<std::string> RenderLlama2(std::span<const ChatMessage> msgs, const ChatRenderOptions& o) {
  const std::optional<std::string_view> system = TakeSystem(msgs);
  const bool has_system = system.has_value();
  std::string out;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if ((m.role == "user") != (i % 2 == 0)) {
      return Status::Error("Conversation roles must alternate user/assistant/user/assistant/...");
    }
    std::string content = m.content;
    if (i == 0 && has_system) {
      content = "<<SYS>>\n" + std::string(*system) + "\n<</SYS>>\n\n" + m.content;
    }
    if (m.role == "user") {
      out += o.bos_token + "[INST] ";
      out += Trim(content);
      out += " [/INST]";
    } else if (m.role == "assistant") {
      out += " ";
      out += Trim(content);
      out += " " + o.eos_token;
    }
  }
  return out;
}

// Gemma (1 and 2): no system role, strictly alternating turns, "model" for the assistant.
Result<std::string> RenderGemma(std::span<const ChatMessage> msgs, const ChatRenderOptions& o) {
  if (!msgs.empty() && msgs[0].role == "system") {
    return Status::Error("System role not supported");
  }
  std::string out = o.bos_token;
  for (size_t i = 0; i < msgs.size(); ++i) {
    if ((msgs[i].role == "user") != (i % 2 == 0)) {
      return Status::Error("Conversation roles must alternate user/assistant/user/assistant/...");
    }
    const std::string& role = msgs[i].role == "assistant" ? "model" : msgs[i].role;
    out += "<start_of_turn>" + role + "\n";
    out += Trim(msgs[i].content);
    out += "<end_of_turn>\n";
  }
  if (o.add_generation_prompt) out += "<start_of_turn>model\n";
  return out;
}

// Phi-3.5-mini: an empty system message and any other role are left out; without the
// generation prompt the text ends with EOS.
std::string RenderPhi3(std::span<const ChatMessage> msgs, const ChatRenderOptions& o) {
  std::string out;
  for (const ChatMessage& m : msgs) {
    if ((m.role == "system" && !m.content.empty()) || m.role == "user" || m.role == "assistant") {
      out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
    }
  }
  out += o.add_generation_prompt ? "<|assistant|>\n" : o.eos_token;
  return out;
}

// Granite 3.0 without tools: each known role as a block; the generation prompt follows the last
// message (none for an empty conversation).
std::string RenderGranite(std::span<const ChatMessage> msgs, const ChatRenderOptions& o) {
  std::string out;
  for (const ChatMessage& m : msgs) {
    if (m.role == "system" || m.role == "user" || m.role == "assistant" ||
        m.role == "tool_response") {
      out += "<|start_of_role|>" + m.role + "<|end_of_role|>" + m.content + "<|end_of_text|>\n";
    } else if (m.role == "assistant_tool_call") {
      out += "<|start_of_role|>assistant<|end_of_role|><|tool_call|>" + m.content +
             "<|end_of_text|>\n";
    }
  }
  if (!msgs.empty() && o.add_generation_prompt) out += "<|start_of_role|>assistant<|end_of_role|>";
  return out;
}

std::string PlainJoin(std::span<const ChatMessage> messages) {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i > 0) out += "\n";
    out += messages[i].content;
  }
  return out;
}

// The BOS/EOS texts a family's published tokenizer uses.
ChatRenderOptions FamilyDefaults(ChatFormat f, bool add_generation_prompt) {
  ChatRenderOptions o;
  o.add_generation_prompt = add_generation_prompt;
  switch (f) {
    case ChatFormat::kLlama3:
    case ChatFormat::kLlama31:
      o.bos_token = "<|begin_of_text|>";
      o.eos_token = "<|eot_id|>";
      break;
    case ChatFormat::kMistral:
    case ChatFormat::kMistralNemo:
    case ChatFormat::kLlama2:
      o.bos_token = "<s>";
      o.eos_token = "</s>";
      break;
    case ChatFormat::kGemma:
      o.bos_token = "<bos>";
      o.eos_token = "<eos>";
      break;
    case ChatFormat::kPhi3:
      o.bos_token = "<s>";
      o.eos_token = "<|endoftext|>";
      break;
    case ChatFormat::kGranite:
      o.bos_token = "<|end_of_text|>";
      o.eos_token = "<|end_of_text|>";
      break;
    case ChatFormat::kChatML:
    case ChatFormat::kQwen2:
    case ChatFormat::kQwen3:
      o.eos_token = "<|im_end|>";
      break;
    case ChatFormat::kNone:
      break;
  }
  return o;
}

std::string TemplateHead(std::string_view t) {
  std::string head(t.substr(0, 80));
  for (char& c : head) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return head + (t.size() > 80 ? "..." : "");
}

}  // namespace

Result<ChatFormat> ChatFormatFromName(std::string_view name) {
  for (const NamedFormat& n : kFormatNames) {
    if (n.name == name) return n.format;
  }
  return Status::Error("unknown chat template name \"" + Printable(name) +
                       "\"; known: " + ChatFormatNames());
}

std::string_view ChatFormatName(ChatFormat f) {
  for (const NamedFormat& n : kFormatNames) {
    if (n.format == f) return n.name;
  }
  return "unknown";
}

std::string ChatFormatNames() {
  std::string out;
  for (const NamedFormat& n : kFormatNames) {
    if (!out.empty()) out += ", ";
    out += n.name;
  }
  return out;
}

namespace {

// A template the engine renders exactly, by the FNV-1a 64 hash and length of its text after
// NormalizeTemplate (the texts themselves are not in the tree: see tests/tokenizer/data/chat.json).
struct KnownTemplate {
  uint64_t fnv1a;
  size_t size;
  ChatFormat format;
};
constexpr KnownTemplate kKnownTemplates[] = {
    {0x0e60067a5537498eULL, 389, ChatFormat::kLlama3},  // Llama 3 Instruct
    {0x2bfdb7aa9754484eULL, 4116, ChatFormat::kQwen3},  // Qwen3
    // Llama 3.1 and 3.3 Instruct (one template); RenderLlama31 is its rendering without tools.
    {0xcc0368e1ffb6b958ULL, 4613, ChatFormat::kLlama31},
    {0x5c10ee65212d93b3ULL, 591, ChatFormat::kGemma},         // Gemma 2 (2B, 9B, 27B) it
    {0xcf278cde387a54c8ULL, 430, ChatFormat::kPhi3},          // Phi-3.5-mini-instruct
    {0x0f0e22051160bcb0ULL, 1185, ChatFormat::kGranite},      // Granite 3.0 instruct
    {0x20783e9d94168233ULL, 3944, ChatFormat::kMistralNemo},  // Mistral Nemo Instruct 2407
};

// CRLF as LF and surrounding whitespace trimmed: the differences a copy of a template may pick
// up that do not change what it renders.
std::string NormalizeTemplate(std::string_view t) {
  std::string out;
  out.reserve(t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '\r' && i + 1 < t.size() && t[i + 1] == '\n') continue;
    out += t[i];
  }
  const auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  size_t b = 0, e = out.size();
  while (b < e && space(out[b])) ++b;
  while (e > b && space(out[e - 1])) --e;
  return out.substr(b, e - b);
}

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

// The family by the parts of its template no other family's template has (what --chat used to
// go by; now only a hint in the refusal).
std::optional<ChatFormat> FamilyByMarkers(std::string_view t) {
  if (Contains(t, "<|start_header_id|>") && Contains(t, "<|eot_id|>")) {
    return Contains(t, "Cutting Knowledge Date") ? ChatFormat::kLlama31 : ChatFormat::kLlama3;
  }
  if (Contains(t, "<|im_start|>") && Contains(t, "<|im_end|>")) {
    if (Contains(t, "enable_thinking") && Contains(t, "<think>")) return ChatFormat::kQwen3;
    if (Contains(t, "You are a helpful assistant.") && !Contains(t, "tools")) {
      return ChatFormat::kQwen2;
    }
    if (!Contains(t, "system") && !Contains(t, "tools")) return ChatFormat::kChatML;
  }
  if (Contains(t, "<start_of_turn>") && Contains(t, "<end_of_turn>")) return ChatFormat::kGemma;
  if (Contains(t, "<|user|>") && Contains(t, "<|end|>")) return ChatFormat::kPhi3;
  if (Contains(t, "<|start_of_role|>") && Contains(t, "<|end_of_role|>")) {
    return ChatFormat::kGranite;
  }
  if (Contains(t, "\"[INST]\" + ") && Contains(t, "[/INST]")) return ChatFormat::kMistralNemo;
  if (Contains(t, "[INST] ") && Contains(t, "[/INST]")) {
    if (Contains(t, "<<SYS>>") && Contains(t, "' [/INST]'")) return ChatFormat::kLlama2;
    if (Contains(t, "[AVAILABLE_TOOLS] [") && Contains(t, "loop.last and system_message")) {
      return ChatFormat::kMistral;
    }
  }
  return std::nullopt;
}

}  // namespace

// Templates are not interpreted: one is used only when it is, byte for byte, a published
// template whose rendering is built in. A template that merely looks like a family (its markers
// plus an extra instruction, say) would render without what it adds, so it is refused.
Result<ChatFormat> ChatFormatFromTemplate(std::string_view t) {
  const std::string norm = NormalizeTemplate(t);
  const uint64_t h = Fnv1a(norm);
  for (const KnownTemplate& k : kKnownTemplates) {
    if (k.size == norm.size() && k.fnv1a == h) return k.format;
  }
  const std::optional<ChatFormat> like = FamilyByMarkers(t);
  std::string why = "chat template not supported (tokenizer.chat_template, " +
                    std::to_string(t.size()) + " bytes: \"" + TemplateHead(t) + "\"): ";
  why += like ? "it resembles " + std::string(ChatFormatName(*like)) +
                    " but is not a published template this engine renders exactly"
              : "it is not a template this engine renders";
  return Status::Error(why + "; choose a built-in rendering with --chat-template NAME (" +
                       ChatFormatNames() + ")");
}

ChatFormat DetectChatFormat(const Tokenizer& tokenizer) {
  const std::string& tmpl = tokenizer.spec().chat_template;
  if (!tmpl.empty()) {
    auto f = ChatFormatFromTemplate(tmpl);
    if (f.ok()) return *f;
  }
  // Lenient: a family's marker in the template text, then in the vocabulary.
  struct Marker {
    std::string_view text;
    ChatFormat format;
  };
  constexpr Marker kMarkers[] = {
      {"<|start_header_id|>", ChatFormat::kLlama3}, {"<|im_start|>", ChatFormat::kChatML},
      {"<start_of_turn>", ChatFormat::kGemma},      {"<|start_of_role|>", ChatFormat::kGranite},
      {"<|assistant|>", ChatFormat::kPhi3},         {"[INST]", ChatFormat::kMistral}};
  for (const Marker& m : kMarkers) {
    if (Contains(tmpl, m.text)) return m.format;
  }
  for (const Marker& m : kMarkers) {
    if (tokenizer.FindToken(m.text) >= 0) return m.format;
  }
  return ChatFormat::kNone;
}

Result<ChatFormat> ResolveChatFormat(const Tokenizer& tokenizer, std::string_view name) {
  if (!name.empty()) return ChatFormatFromName(name);
  const std::string& tmpl = tokenizer.spec().chat_template;
  if (!tmpl.empty()) return ChatFormatFromTemplate(tmpl);
  return DetectChatFormat(tokenizer);
}

Result<std::string> RenderChat(ChatFormat format, std::span<const ChatMessage> messages,
                               const ChatRenderOptions& options) {
  switch (format) {
    case ChatFormat::kLlama3:
      return RenderLlama3(messages, options);
    case ChatFormat::kLlama31:
      return RenderLlama31(messages, options);
    case ChatFormat::kChatML:
      return RenderChatML(messages, options, {});
    case ChatFormat::kQwen2:
      return RenderChatML(messages, options, "You are a helpful assistant.");
    case ChatFormat::kQwen3:
      return RenderQwen3(messages, options);
    case ChatFormat::kMistral:
      return RenderMistral(messages, options, /*tekken=*/false);
    case ChatFormat::kLlama2:
      return RenderLlama2(messages, options);
    case ChatFormat::kGemma:
      return RenderGemma(messages, options);
    case ChatFormat::kPhi3:
      return RenderPhi3(messages, options);
    case ChatFormat::kGranite:
      return RenderGranite(messages, options);
    case ChatFormat::kMistralNemo:
      return RenderMistral(messages, options, /*tekken=*/true);
    case ChatFormat::kNone:
      break;
  }
  return PlainJoin(messages);
}

Result<std::string> RenderChat(const Tokenizer& tokenizer, ChatFormat format,
                               std::span<const ChatMessage> messages,
                               const ChatRenderOptions& options) {
  ChatRenderOptions o = options;
  const TokenizerSpec& spec = tokenizer.spec();
  auto text = [&](Token t) {
    return t >= 0 && static_cast<size_t>(t) < spec.tokens.size()
               ? spec.tokens[static_cast<size_t>(t)]
               : std::string();
  };
  o.bos_token = text(spec.bos);
  o.eos_token = text(spec.eos);
  return RenderChat(format, messages, o);
}

std::string ApplyChatTemplate(ChatFormat format, std::span<const ChatMessage> messages,
                              bool add_generation_prompt) {
  const ChatRenderOptions o = FamilyDefaults(format, add_generation_prompt);
  auto r = RenderChat(format, messages, o);
  if (!r.ok()) return "";
  std::string out = std::move(r).value();
  if (!o.bos_token.empty() && out.starts_with(o.bos_token)) out.erase(0, o.bos_token.size());
  return out;
}

std::string ApplyChatTemplateFollowUp(ChatFormat format, std::string_view user_content) {
  const std::vector<ChatMessage> turn = {{"user", std::string(user_content)}};
  switch (format) {
    case ChatFormat::kLlama31:
      return ApplyChatTemplate(ChatFormat::kLlama3, turn, true);
    case ChatFormat::kQwen2:
      return ApplyChatTemplate(ChatFormat::kChatML, turn, true);
    case ChatFormat::kLlama2:
      // The Llama 2 template opens every user turn with BOS.
      return "<s>" + ApplyChatTemplate(format, turn, true);
    default:
      return ApplyChatTemplate(format, turn, true);
  }
}

}  // namespace primekv
