#include <string>

#include "primekv/tokenizer.h"

namespace primekv {

ConversationTokens EncodeConversation(const Tokenizer& tokenizer, bool chat,
                                      std::string_view context,
                                      std::span<const std::string> questions,
                                      std::span<const std::string> answer_prefixes,
                                      std::optional<ChatFormat> format) {
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
  const ChatFormat fmt = format ? *format : DetectChatFormat(tokenizer);
  // A marker no template produces: where the context ends inside the first user message.
  const std::string sep = "\x1f\x1e";
  const std::vector<ChatMessage> first{
      {"user", std::string(context) + (questions.empty() ? "" : sep)}};
  std::string rendered = ApplyChatTemplate(fmt, first, true);
  const auto cut = questions.empty() ? std::string::npos : rendered.find(sep);
  std::string suffix;
  if (cut != std::string::npos) {
    suffix = rendered.substr(cut + sep.size());
    rendered.resize(cut);
  }
  out.context = tokenizer.Encode(rendered, true, true);
  for (size_t i = 0; i < questions.size(); ++i) {
    std::string text =
        i == 0 ? "\n\n" + questions[i] + suffix : ApplyChatTemplateFollowUp(fmt, questions[i]);
    out.turns.push_back(tokenizer.Encode(text + std::string(prefix(i)), false, true));
  }
  return out;
}

}  // namespace primekv
