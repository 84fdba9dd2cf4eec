// Evaluation tasks and metrics: RULER-style synthetic tasks, a multi-turn query-drift task,
// LongBench, bring-your-own jsonl and AIME problems, each turned into text samples (context,
// turns, references) plus the metric that scores a turn. Running a model is the harness's job.
// docs/eval-tasks.md describes every task.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "primekv/util/status.h"

namespace primekv {

class Tokenizer;

// One question about the sample's context. The prompt of a turn is its question, and the model's
// reply starts with answer_prefix (the runner puts it after the assistant header).
struct EvalTurn {
  std::string question;
  std::string answer_prefix;
  std::vector<std::string> answers;  // references
  int max_new_tokens = 0;
};

struct EvalSample {
  std::string id;
  std::string task;  // generator name, or the LongBench dataset ("qasper"), or "jsonl"/"aime"
  std::string context;
  std::vector<EvalTurn> turns;  // answered in order; a multi-turn runner keeps earlier answers
  // string_match_all | string_match_part | qa_f1 | rouge_l | classification | retrieval |
  // retrieval_zh | count | code_sim | exact_integer
  std::string metric;
  std::vector<std::string> all_classes;  // classification only
  bool first_line_only = false;          // LongBench trec/triviaqa/samsum/lsht score the first line
  int length = 0;                        // LongBench `length` (for LongBench-E buckets); else 0
};

struct TaskOptions {
  // Generated tasks: tokens(context + questions + answer prefixes) + max_new_tokens of every
  // turn is fitted to this (at most, and within 2% when the tokenizer is given).
  int target_tokens = 1024;
  int samples = 10;
  uint64_t seed = 42;
  // Lengths are measured in this tokenizer's tokens (BOS included). Null: whitespace-separated
  // words stand in for tokens.
  const Tokenizer* tokenizer = nullptr;
  int max_new_tokens = 0;   // > 0 replaces every task's default
  int reserved_tokens = 0;  // taken off target_tokens for what the runner adds (chat template)
  int multiturn_facts = 4;  // multiturn: facts hidden in the context, one turn each
  // longbench: a prompt (context + question + answer prefix) whose tokens plus the answer's
  // max_new_tokens exceed this keeps the first and last halves of its context's tokens.
  // 0 = no limit.
  int max_context_tokens = 0;
  int file_samples = 0;  // file tasks: keep the first N valid samples (0 = all)
  // File tasks append one "PATH:LINE: reason" per skipped line here when set.
  std::vector<std::string>* warnings = nullptr;
};

// `task` is a name from ListTasks(), or "jsonl:PATH", "longbench:PATH" or "aime:PATH".
// Generated tasks are deterministic in (task, seed, target_tokens, tokenizer, options).
Result<std::vector<EvalSample>> GenerateTask(std::string_view task, const TaskOptions& options);
// Splits a --tasks value at its commas. A file task (jsonl:, longbench:, aime:) runs up to the
// next comma followed by a ListTasks() name or another PREFIX:, so its path may hold commas:
// "jsonl:a,b.jsonl,niah_single_1" is the file "a,b.jsonl" and niah_single_1.
std::vector<std::string> SplitTaskList(std::string_view list);
// The file of a file task ("jsonl:PATH" -> PATH), or nullopt for a generated task.
std::optional<std::string> TaskFilePath(std::string_view task);
// The generated tasks: the 11 RULER tasks, then "multiturn".
std::vector<std::string> ListTasks();
std::vector<std::string> RulerTasks();
// Default max_new_tokens of a generated task (RULER: niah 128, vt 30, cwe 120, fwe 50), or
// nullopt for an unknown name.
std::optional<int> DefaultMaxNewTokens(std::string_view task);

// Tokens of the whole conversation: context + every question and answer prefix (one encode, BOS
// included) + every turn's max_new_tokens. Whitespace words when tokenizer is null.
int CountSampleTokens(const EvalSample& sample, const Tokenizer* tokenizer);
// Tokens (BOS included) or, without a tokenizer, whitespace-separated words of `text`.
int CountTextTokens(std::string_view text, const Tokenizer* tokenizer);

bool IsKnownMetric(std::string_view metric);
// Scores one turn's prediction with the sample's metric against the turn's references, in
// [0, 1]. Metrics with one reference at a time take the best reference.
double ScoreTurn(const EvalSample& sample, int turn, std::string_view prediction);

// RULER: the fraction of references found (case-insensitively) in the prediction after trimming
// whitespace and deleting control characters.
double StringMatchAll(std::string_view pred, const std::vector<std::string>& refs);
// RULER: 1 if any reference is found, else 0.
double StringMatchPart(std::string_view pred, const std::vector<std::string>& refs);
// SQuAD/LongBench token F1 after normalization (lowercase, no punctuation or articles), best
// reference.
double QaF1(std::string_view pred, const std::vector<std::string>& refs);
// ROUGE-L F as the `rouge` package computes it (summary-level union LCS over sentences split on
// '.', unique words), best reference; 0 when either side has no sentence.
double RougeL(std::string_view pred, const std::vector<std::string>& refs);
// LongBench classification (class names found in the prediction; score 1/#matches if the truth
// is among them).
double Classification(std::string_view pred, std::string_view gt,
                      const std::vector<std::string>& all_classes);
// LongBench passage retrieval: share of the prediction's digit runs equal to N of "Paragraph N".
double Retrieval(std::string_view pred, std::string_view gt);
// Same with the Chinese paragraph marker of passage_retrieval_zh.
double RetrievalZh(std::string_view pred, std::string_view gt);
// LongBench passage count: share of the prediction's digit runs equal to gt.
double Count(std::string_view pred, std::string_view gt);
// LongBench code similarity: fuzzy ratio of the first line without ` # or // against gt.
double CodeSim(std::string_view pred, std::string_view gt);
// 1 if ExtractFinalInteger(pred) equals the integer in gt.
double ExactInteger(std::string_view pred, std::string_view gt);
// The integer in the last \boxed{...} (nullopt if that box holds no single integer), else the
// last integer in the text.
std::optional<long long> ExtractFinalInteger(std::string_view text);

}  // namespace primekv
