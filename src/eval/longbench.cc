// LongBench (v1) jsonl loader: this project's own prompt templates per task category, the
// official generation lengths and metrics per dataset, and middle truncation of long contexts.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/eval_internal.h"
#include "primekv/tokenizer/tokenizer.h"

namespace primekv::eval_internal {
namespace {

using nlohmann::json;

enum class Category { kSingleDoc, kMultiDoc, kSummary, kFewShot, kSynthetic, kCode };

struct Dataset {
  std::string_view name;
  Category category;
  int max_new_tokens;  // LongBench's dataset2maxlen
  std::string_view metric;
  bool first_line_only;
};

constexpr Dataset kDatasets[] = {
    {"narrativeqa", Category::kSingleDoc, 128, "qa_f1", false},
    {"qasper", Category::kSingleDoc, 128, "qa_f1", false},
    {"multifieldqa_en", Category::kSingleDoc, 64, "qa_f1", false},
    {"hotpotqa", Category::kMultiDoc, 32, "qa_f1", false},
    {"2wikimqa", Category::kMultiDoc, 32, "qa_f1", false},
    {"musique", Category::kMultiDoc, 32, "qa_f1", false},
    {"gov_report", Category::kSummary, 512, "rouge_l", false},
    {"qmsum", Category::kSummary, 512, "rouge_l", false},
    {"multi_news", Category::kSummary, 512, "rouge_l", false},
    {"trec", Category::kFewShot, 64, "classification", true},
    {"triviaqa", Category::kFewShot, 32, "qa_f1", true},
    {"samsum", Category::kFewShot, 128, "rouge_l", true},
    {"lsht", Category::kFewShot, 64, "classification", true},
    {"passage_count", Category::kSynthetic, 32, "count", false},
    {"passage_retrieval_en", Category::kSynthetic, 32, "retrieval", false},
    {"passage_retrieval_zh", Category::kSynthetic, 32, "retrieval_zh", false},
    {"lcc", Category::kCode, 64, "code_sim", false},
    {"repobench-p", Category::kCode, 64, "code_sim", false},
};

// Chinese datasets whose metric needs jieba word segmentation.
constexpr std::string_view kNeedsSegmentation[] = {"multifieldqa_zh", "dureader", "vcsum"};

const Dataset* FindDataset(std::string_view name) {
  for (const Dataset& d : kDatasets) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

struct Prompt {
  std::string before, after;  // around the document in the context
  std::string question, answer_prefix;
};

Prompt SingleDocPrompt(const Dataset& d, const std::string& input) {
  std::string question = "Using the document above, answer the question as briefly as possible.";
  if (d.name == "qasper") {
    question +=
        " If the document does not answer it, reply \"unanswerable\"; answer a yes/no "
        "question with \"yes\", \"no\" or \"unanswerable\".";
  }
  return {"Read the document below and answer a question about it.\n\nDocument:\n", "\n\n",
          question + "\n\nQuestion: " + input + "\n", "Answer:"};
}

Prompt MultiDocPrompt(const Dataset&, const std::string& input) {
  return {"Answer a question using the passages below.\n\nPassages:\n", "\n\n",
          "Using the passages above, give only the answer, with no other words.\n\nQuestion: " +
              input + "\n",
          "Answer:"};
}

Prompt SummaryPrompt(const Dataset& d, const std::string& input) {
  if (d.name == "qmsum") {
    return {"Below is a meeting transcript, followed by a query about it.\n\nTranscript:\n", "\n\n",
            "Answer the query about the transcript above in one or more sentences.\n\nQuery: " +
                input + "\n",
            "Answer:"};
  }
  const bool news = d.name == "multi_news";
  std::string question = news ? "Now write a one-page summary of all the articles above."
                              : "Now write a one-page summary of the report above.";
  if (!input.empty()) question += "\n\n" + input;
  return {news ? "Below are several news articles to summarize together.\n\nNews:\n"
               : "Below is a report to summarize.\n\nReport:\n",
          "\n\n", question + "\n\n", "Summary:"};
}

// The input is the test item written like the examples, so it ends with their label cue.
Prompt FewShotPrompt(const Dataset& d, const std::string& input) {
  std::string before;
  if (d.name == "trec") {
    before =
        "Say which type the last question belongs to. Example questions with their types "
        "come first.\n\n";
  } else if (d.name == "triviaqa") {
    before =
        "Answer the last question from its passage, giving only the answer. Worked "
        "examples come first.\n\n";
  } else if (d.name == "samsum") {
    before = "Summarize the last dialogue in a few short sentences. Examples come first.\n\n";
  } else {
    before =
        "Say which category the last news article belongs to. Labelled examples come "
        "first.\n\n";
  }
  return {before, "\n\n", input, ""};
}

Prompt SyntheticPrompt(const Dataset& d, const std::string& input) {
  if (d.name == "passage_count") {
    return {
        "Below are several paragraphs; some of them may repeat. Read them all and work out "
        "how many different paragraphs there are.\n\n",
        "\n\n",
        "How many different paragraphs are there once repeats are removed? Reply with a "
        "single number only.\n\n",
        "The number of different paragraphs is: "};
  }
  const bool zh = d.name == "passage_retrieval_zh";
  return {
      "Below are several numbered paragraphs, followed by a summary of one of them.\n\n", "\n\n",
      "Summary:\n" + input + "\n\nWhich paragraph does the summary come from? Reply in the form " +
          (zh ? std::string("\"\xE6\xAE\xB5\xE8\x90\xBD"
                            "1\"")
              : std::string("\"Paragraph 1\"")) +
          ".\n\n",
      "The answer is: "};
}

Prompt CodePrompt(const Dataset& d, const std::string& input) {
  if (d.name == "repobench-p") {
    return {"Complete the code at the end, using the repository files below.\n\n", "",
            input + "\n\nWrite the next line of the code above.\n", "Next line of code:\n"};
  }
  return {"Complete the code below.\n\n", "", "\n\nWrite the next line of the code above.\n",
          "Next line of code:\n"};
}

Prompt MakePrompt(const Dataset& d, const std::string& input) {
  using MakeFn = Prompt (*)(const Dataset&, const std::string&);
  constexpr MakeFn kByCategory[] = {SingleDocPrompt, MultiDocPrompt,  SummaryPrompt,
                                    FewShotPrompt,   SyntheticPrompt, CodePrompt};  // by Category
  return kByCategory[static_cast<size_t>(d.category)](d, input);
}

// Keeps the first `head` and last `tail` whitespace words of `text`, cut at word boundaries.
std::string KeepWordEnds(const std::string& text, size_t head, size_t tail) {
  const std::vector<std::string_view> words = PySplit(text);
  if (head + tail >= words.size()) return text;
  const auto offset = [&](std::string_view w) {
    return static_cast<size_t>(w.data() - text.data());
  };
  std::string out;
  if (head > 0) out = text.substr(0, offset(words[head - 1]) + words[head - 1].size());
  if (tail > 0) {
    if (!out.empty()) out += ' ';
    out += text.substr(offset(words[words.size() - tail]));
  }
  return out;
}

// LongBench's middle truncation: when the prompt exceeds the limit, keep the first and last
// halves of what fits of the document.
std::string TruncateMiddle(const Prompt& p, const std::string& full_document,
                           const TaskOptions& options) {
  const Tokenizer* tok = options.tokenizer;
  // A document far longer than the limit can hold is cut to its two ends by bytes before it is
  // tokenized (tokenizing 100 MB takes minutes): the kept halves are at most limit / 2 tokens
  // each, so at most limit / 2 * MaxTokenBytes bytes; keeping twice that per end leaves the
  // tokens near the kept text as they were.
  std::string cut;
  if (tok != nullptr && options.max_context_tokens > 0) {
    const size_t end_bytes = static_cast<size_t>(options.max_context_tokens) * tok->MaxTokenBytes();
    if (full_document.size() > 2 * end_bytes) {
      size_t head = end_bytes, tail = full_document.size() - end_bytes;
      // Whole UTF-8 characters only.
      while (head > 0 && (static_cast<unsigned char>(full_document[head]) & 0xC0) == 0x80) --head;
      while (tail < full_document.size() &&
             (static_cast<unsigned char>(full_document[tail]) & 0xC0) == 0x80)
        ++tail;
      cut = full_document.substr(0, head) + " " + full_document.substr(tail);
    }
  }
  const std::string& document = cut.empty() ? full_document : cut;
  const auto prompt_tokens = [&](const std::string& doc) {
    return CountTextTokens(p.before + doc + p.after + p.question + p.answer_prefix, tok);
  };
  std::string doc = document;
  int over = prompt_tokens(doc) - options.max_context_tokens;
  if (over <= 0) return doc;
  std::vector<Token> ids;
  size_t units = 0;
  if (tok != nullptr) {
    ids = tok->Encode(document, /*add_bos=*/false);
    units = ids.size();
  } else {
    units = PySplit(document).size();
  }
  // Token boundaries can merge after the cut, so tighten until the prompt fits.
  long long keep = static_cast<long long>(units);
  for (int attempt = 0; attempt < 8 && over > 0 && keep > 0; ++attempt) {
    keep = std::max(0LL, keep - over);
    const size_t head = static_cast<size_t>(keep / 2), tail = static_cast<size_t>(keep) - head;
    if (tok != nullptr) {
      const std::span<const Token> all(ids);
      doc = tok->Decode(all.first(head), /*strip_leading_space=*/true) +
            tok->Decode(all.last(tail), /*strip_leading_space=*/false);
    } else {
      doc = KeepWordEnds(document, head, tail);
    }
    over = prompt_tokens(doc) - options.max_context_tokens;
  }
  return doc;
}

Result<EvalSample> ParseLongBenchLine(const json& j, int line_no, const std::string& path,
                                      const std::string& file_dataset, const TaskOptions& options) {
  std::string name = file_dataset;
  if (const auto it = j.find("dataset"); it != j.end() && it->is_string())
    name = it->get<std::string>();
  if (std::find(std::begin(kNeedsSegmentation), std::end(kNeedsSegmentation), name) !=
      std::end(kNeedsSegmentation)) {
    return Status::Error("dataset \"" + name +
                         "\" is scored with Chinese word segmentation, which is not supported");
  }
  const Dataset* d = FindDataset(name);
  // LongBench-E files name their dataset with an "_e" suffix.
  if (d == nullptr && name.size() > 2 && name.ends_with("_e")) {
    name.resize(name.size() - 2);
    d = FindDataset(name);
  }
  if (d == nullptr) return Status::Error("unknown LongBench dataset \"" + name + "\"");

  const auto context = j.find("context");
  if (context == j.end() || !context->is_string())
    return Status::Error("missing string \"context\"");
  std::string input;
  if (const auto it = j.find("input"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) return Status::Error("\"input\" must be a string");
    input = it->get<std::string>();
  }
  const auto answers = j.find("answers");
  if (answers == j.end() || !answers->is_array() || answers->empty()) {
    return Status::Error("\"answers\" must be a non-empty array of strings");
  }
  EvalTurn turn;
  for (const json& a : *answers) {
    if (!a.is_string()) return Status::Error("\"answers\" must hold only strings");
    turn.answers.push_back(a.get<std::string>());
  }
  EvalSample s;
  if (const auto it = j.find("all_classes"); it != j.end() && !it->is_null()) {
    if (!it->is_array())
      return Status::Error("\"all_classes\" must be an array of strings or null");
    for (const json& c : *it) {
      if (!c.is_string()) return Status::Error("\"all_classes\" must hold only strings");
      s.all_classes.push_back(c.get<std::string>());
    }
  }
  if (d->metric == "classification" && s.all_classes.empty()) {
    return Status::Error("classification dataset \"" + name + "\" needs \"all_classes\"");
  }
  if (const auto it = j.find("length"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer()) return Status::Error("\"length\" must be an integer");
    s.length = static_cast<int>(it->get<long long>());
  }
  s.id = path + ":" + std::to_string(line_no);
  if (const auto it = j.find("_id"); it != j.end() && it->is_string())
    s.id = it->get<std::string>();

  const Prompt p = MakePrompt(*d, input);
  std::string document = context->get<std::string>();
  turn.max_new_tokens = EffectiveMaxNewTokens(options, d->max_new_tokens);
  if (options.max_context_tokens > 0) {
    // The limit covers the answer too, so what is cut to fit also leaves room to reply.
    TaskOptions fit = options;
    fit.max_context_tokens = std::max(1, options.max_context_tokens - turn.max_new_tokens);
    document = TruncateMiddle(p, document, fit);
  }
  s.task = std::string(d->name);
  s.context = p.before + document + p.after;
  turn.question = p.question;
  turn.answer_prefix = p.answer_prefix;
  s.turns.push_back(std::move(turn));
  s.metric = std::string(d->metric);
  s.first_line_only = d->first_line_only;
  return s;
}

}  // namespace

Result<std::vector<EvalSample>> ParseLongBench(const std::string& path, std::string_view text,
                                               const TaskOptions& options) {
  // Lines without a "dataset" field take it from the file name ("qasper.jsonl").
  std::string stem =
      path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  if (const size_t dot = stem.find('.'); dot != std::string::npos) stem.resize(dot);
  return ParseJsonLines(path, text, options, [&](const json& j, int line_no) {
    return ParseLongBenchLine(j, line_no, path, stem, options);
  });
}

}  // namespace primekv::eval_internal
