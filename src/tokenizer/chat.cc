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

}  // namespace primekv
