// Checked access to untrusted JSON (tokenizer files, manifests, eval folders, task files):
// nesting is bounded before anything is parsed, and every typed read names the field's path in
// its error ("tokenizer.json: added_tokens[3].id: expected an integer, got a string"), so a
// wrongly typed field is a message, never an exception.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "primekv/util/status.h"

namespace primekv {

// Deepest array/object nesting any reader accepts (the deepest real file, a tokenizer.json,
// nests about 8 levels).
inline constexpr int kMaxJsonDepth = 128;

// Refuses text whose arrays/objects nest deeper than `max_depth`, in one pass with no recursion
// (nlohmann's parser and dump() recurse per level: 200k levels overflow the stack).
Status CheckJsonDepth(std::string_view text, std::string_view what, int max_depth = kMaxJsonDepth);

// CheckJsonDepth, then a parse that reports errors instead of throwing. `what` names the input.
Result<nlohmann::json> ParseJson(std::string_view text, std::string_view what,
                                 int max_depth = kMaxJsonDepth);

// "a string", "an integer", ... for messages.
std::string JsonKindName(const nlohmann::json& v);

// One value of a parsed document and the path that reached it.
class JsonNode {
 public:
  JsonNode(const nlohmann::json& value, std::string path) : v_(&value), path_(std::move(path)) {}

  const nlohmann::json& raw() const { return *v_; }
  const std::string& path() const { return path_; }
  bool is_null() const { return v_->is_null(); }
  bool is_object() const { return v_->is_object(); }
  bool is_array() const { return v_->is_array(); }
  bool is_string() const { return v_->is_string(); }

  // An error naming this node: "PATH: why".
  Status Error(std::string_view why) const;

  // A member that must be present (this node must be an object).
  Result<JsonNode> Field(std::string_view key) const;
  // A member that may be absent or null: nullopt then. An error if this node is not an object.
  Result<std::optional<JsonNode>> Optional(std::string_view key) const;

  Result<std::string> String() const;
  Result<bool> Bool() const;
  // An integer (no fraction) within [lo, hi].
  Result<int64_t> Integer(int64_t lo, int64_t hi) const;
  // A finite number.
  Result<double> Number() const;
  Result<std::vector<JsonNode>> Elements() const;                         // an array
  Result<std::vector<std::pair<std::string, JsonNode>>> Members() const;  // an object

  // Optional members with a default when absent or null.
  Result<std::string> StringOr(std::string_view key, std::string fallback) const;
  Result<bool> BoolOr(std::string_view key, bool fallback) const;
  Result<int64_t> IntegerOr(std::string_view key, int64_t fallback, int64_t lo, int64_t hi) const;
  Result<double> NumberOr(std::string_view key, double fallback) const;

 private:
  Status Expected(std::string_view kind) const;
  std::string Child(std::string_view key) const;

  const nlohmann::json* v_;
  std::string path_;
};

}  // namespace primekv
