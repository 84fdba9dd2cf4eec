#include <string>

#include "primekv/tokenizer.h"

namespace primekv {

ChatFormat DetectChatFormat(const Tokenizer& tokenizer) {
  struct Marker {
    std::string_view text;
    ChatFormat format;
  };
  constexpr Marker kMarkers[] = {{"<|start_header_id|>", ChatFormat::kLlama3},
                                 {"<|im_start|>", ChatFormat::kChatML},
                                 {"[INST]", ChatFormat::kMistral}};
  const std::string& tmpl = tokenizer.spec().chat_template;
  for (const Marker& m : kMarkers) {
    if (tmpl.find(m.text) != std::string::npos) return m.format;
  }
  for (const Marker& m : kMarkers) {
    if (tokenizer.FindToken(m.text) >= 0) return m.format;
  }
  return ChatFormat::kNone;
}

std::string_view ChatFormatName(ChatFormat f) {
  switch (f) {
    case ChatFormat::kNone:
      return "none";
    case ChatFormat::kLlama3:
      return "llama3";
    case ChatFormat::kChatML:
      return "chatml";
    case ChatFormat::kMistral:
      return "mistral";
  }
  return "unknown";
}

std::string ApplyChatTemplate(ChatFormat format, std::span<const ChatMessage> messages,
                              bool add_generation_prompt) {
  std::string out;
  switch (format) {
    case ChatFormat::kLlama3:
      for (const ChatMessage& m : messages) {
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      return out;
    case ChatFormat::kChatML:
      for (const ChatMessage& m : messages) {
        out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      }
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      return out;
    case ChatFormat::kMistral: {
      // Mistral has no system role: system text joins the next user turn. The prompt already
      // ends with [/INST], so the generation prompt adds nothing.
      std::string system;
      for (const ChatMessage& m : messages) {
        if (m.role == "system") {
          if (!system.empty()) system += "\n\n";
          system += m.content;
        } else if (m.role == "assistant") {
          out += m.content + "</s>";
        } else {
          out += "[INST] ";
          if (!system.empty()) out += system + "\n\n";
          out += m.content + " [/INST]";
          system.clear();
        }
      }
      if (!system.empty()) out += "[INST] " + system + " [/INST]";
      return out;
    }
    case ChatFormat::kNone:
      break;
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i > 0) out += "\n";
    out += messages[i].content;
  }
  return out;
}

ConversationTokens EncodeConversation(const Tokenizer& tokenizer, bool chat,
                                      std::string_view context,
                                      std::span<const std::string> questions,
                                      std::span<const std::string> answer_prefixes) {
  auto prefix = [&](size_t i) -> std::string_view {
    return i < answer_prefixes.size() ? std::string_view(answer_prefixes[i]) : std::string_view();
  };
  ConversationTokens out;
  if (!chat) {
    out.context = tokenizer.Encode(context, true, false);
    for (size_t i = 0; i < questions.size(); ++i) {
      out.turns.push_back(
          tokenizer.Encode("\n" + questions[i] + "\n" + std::string(prefix(i)), false, false));
    }
    return out;
  }
  const ChatFormat fmt = DetectChatFormat(tokenizer);
  // The first user message holds the context then the first question; the context must end the
  // context's tokens. Every template renders a lone user message as head + content + tail, so
  // head and tail are found from two renders of fixed one-byte contents, never by searching the
  // user's text for a marker (which the user could type).
  const auto render = [&](std::string content) {
    return ApplyChatTemplate(fmt, std::vector<ChatMessage>{{"user", std::move(content)}}, true);
  };
  const std::string with_a = render("a"), with_b = render("b");
  size_t head_len = 0;
  while (head_len < with_a.size() && with_a[head_len] == with_b[head_len]) ++head_len;
  Check(with_a.size() == with_b.size() && head_len < with_a.size(),
        "EncodeConversation: the template must render a user message's content verbatim");
  const std::string head = with_a.substr(0, head_len);
  const std::string tail = with_a.substr(head_len + 1);
  std::string rendered = head + std::string(context);
  std::string suffix = tail;
  if (questions.empty()) rendered += tail;
  out.context = tokenizer.Encode(rendered, true, true);
  for (size_t i = 0; i < questions.size(); ++i) {
    std::string text =
        i == 0 ? "\n\n" + questions[i] + suffix
               : ApplyChatTemplate(fmt, std::vector<ChatMessage>{{"user", questions[i]}}, true);
    out.turns.push_back(tokenizer.Encode(text + std::string(prefix(i)), false, true));
  }
  return out;
}

}  // namespace primekv
