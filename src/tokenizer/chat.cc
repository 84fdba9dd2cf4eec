#include <string>

#include "primekv/tokenizer/tokenizer.h"

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
        i == 0 ? "\n\n" + questions[i] + suffix : ApplyChatTemplateFollowUp(fmt, questions[i]);
    out.turns.push_back(tokenizer.Encode(text + std::string(prefix(i)), false, true));
  }
  return out;
}

}  // namespace primekv
