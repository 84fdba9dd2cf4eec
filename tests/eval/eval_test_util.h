// Helpers shared by the eval tests.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "primekv/eval/eval.h"
#include "primekv/tokenizer/tokenizer.h"

namespace primekv::eval_test {

// The project's synthetic Llama-style tokenizer: a real BPE, so lengths are real token counts.
inline Tokenizer MakeSynthetic(const char* kind) {
  auto spec = MakeSyntheticTokenizerSpec(kind, 2000);
  Check(spec.ok(), "synthetic tokenizer spec");
  auto tok = Tokenizer::Create(std::move(spec).value());
  Check(tok.ok(), "synthetic tokenizer");
  return std::move(tok).value();
}

inline const Tokenizer& SyntheticLlama() {
  static const Tokenizer tokenizer = MakeSynthetic("llama");
  return tokenizer;
}

// The byte-level BPE flavour (Llama-3/Qwen-style vocabularies).
inline const Tokenizer& SyntheticGpt2() {
  static const Tokenizer tokenizer = MakeSynthetic("gpt2");
  return tokenizer;
}

// Tokens of the whole conversation counted here, independently of CountSampleTokens.
inline int ConversationTokens(const EvalSample& s, const Tokenizer& tok) {
  std::string text = s.context;
  int generated = 0;
  for (const EvalTurn& t : s.turns) {
    text += t.question + t.answer_prefix;
    generated += t.max_new_tokens;
  }
  return static_cast<int>(tok.Encode(text, /*add_bos=*/true).size()) + generated;
}

inline int CountOccurrences(std::string_view text, std::string_view needle) {
  int n = 0;
  for (size_t pos = text.find(needle); pos != std::string_view::npos;
       pos = text.find(needle, pos + 1)) {
    ++n;
  }
  return n;
}

inline std::vector<EvalSample> Generate(std::string_view task, const TaskOptions& options) {
  Result<std::vector<EvalSample>> r = GenerateTask(task, options);
  EXPECT_TRUE(r.ok()) << task << ": " << r.message();
  return r.ok() ? std::move(r).value() : std::vector<EvalSample>{};
}

inline bool SameSamples(const std::vector<EvalSample>& a, const std::vector<EvalSample>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].id != b[i].id || a[i].context != b[i].context || a[i].metric != b[i].metric ||
        a[i].turns.size() != b[i].turns.size()) {
      return false;
    }
    for (size_t t = 0; t < a[i].turns.size(); ++t) {
      const EvalTurn &x = a[i].turns[t], &y = b[i].turns[t];
      if (x.question != y.question || x.answer_prefix != y.answer_prefix ||
          x.answers != y.answers || x.max_new_tokens != y.max_new_tokens) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace primekv::eval_test
