#include "primekv/util/json_read.h"

#include <cmath>

#include "primekv/util/text.h"

namespace primekv {

using nlohmann::json;

Status CheckJsonDepth(std::string_view text, std::string_view what, int max_depth) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return Status::Error(std::string(what) + ": JSON nested deeper than " +
                             std::to_string(max_depth) + " levels (at byte " + std::to_string(i) +
                             ")");
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return Status::Ok();
}

Result<json> ParseJson(std::string_view text, std::string_view what, int max_depth) {
  PRIMEKV_RETURN_IF_ERROR(CheckJsonDepth(text, what, max_depth));
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return Status::Error(std::string(what) + ": not valid JSON: " + Printable(e.what(), 160));
  }
}

std::string JsonKindName(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a number";
    case json::value_t::binary:
      return "binary data";
    case json::value_t::discarded:
      return "nothing";
  }
  return "something else";
}

Status JsonNode::Error(std::string_view why) const {
  return Status::Error(path_ + ": " + std::string(why));
}

Status JsonNode::Expected(std::string_view kind) const {
  return Error("expected " + std::string(kind) + ", got " + JsonKindName(*v_));
}

std::string JsonNode::Child(std::string_view key) const {
  return path_ + (path_.empty() || path_.back() == ':' ? "" : ".") + Printable(key, 60);
}

Result<JsonNode> JsonNode::Field(std::string_view key) const {
  if (!v_->is_object()) return Expected("an object");
  const auto it = v_->find(key);
  if (it == v_->end()) return Status::Error(Child(key) + ": missing");
  return JsonNode(*it, Child(key));
}

Result<std::optional<JsonNode>> JsonNode::Optional(std::string_view key) const {
  if (!v_->is_object()) return Expected("an object");
  const auto it = v_->find(key);
  if (it == v_->end() || it->is_null()) return std::optional<JsonNode>();
  return std::optional<JsonNode>(JsonNode(*it, Child(key)));
}

Result<std::string> JsonNode::String() const {
  if (!v_->is_string()) return Expected("a string");
  return v_->get<std::string>();
}

Result<bool> JsonNode::Bool() const {
  if (!v_->is_boolean()) return Expected("true or false");
  return v_->get<bool>();
}

Result<int64_t> JsonNode::Integer(int64_t lo, int64_t hi) const {
  std::string range(1, '[');  // appended: GCC 12 -Wrestrict false positive on "[" + string
  range += std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (v_->is_number_unsigned()) {
    // Non-negative literals parse as unsigned: the lower bound applies here too.
    const uint64_t u = v_->get<uint64_t>();
    if (u > static_cast<uint64_t>(hi) || (lo > 0 && u < static_cast<uint64_t>(lo))) {
      return Error(std::to_string(u) + " is outside " + range);
    }
    return static_cast<int64_t>(u);
  }
  if (!v_->is_number_integer()) return Expected("an integer");
  const int64_t i = v_->get<int64_t>();
  if (i < lo || i > hi) return Error(std::to_string(i) + " is outside " + range);
  return i;
}

Result<double> JsonNode::Number() const {
  if (!v_->is_number()) return Expected("a number");
  const double d = v_->get<double>();
  if (!std::isfinite(d)) return Error("not a finite number");
  return d;
}

Result<std::vector<JsonNode>> JsonNode::Elements() const {
  if (!v_->is_array()) return Expected("an array");
  std::vector<JsonNode> out;
  out.reserve(v_->size());
  for (size_t i = 0; i < v_->size(); ++i) {
    out.emplace_back((*v_)[i], path_ + "[" + std::to_string(i) + "]");
  }
  return out;
}

Result<std::vector<std::pair<std::string, JsonNode>>> JsonNode::Members() const {
  if (!v_->is_object()) return Expected("an object");
  std::vector<std::pair<std::string, JsonNode>> out;
  out.reserve(v_->size());
  for (auto it = v_->begin(); it != v_->end(); ++it) {
    out.emplace_back(it.key(), JsonNode(it.value(), Child(it.key())));
  }
  return out;
}

Result<std::string> JsonNode::StringOr(std::string_view key, std::string fallback) const {
  PRIMEKV_ASSIGN_OR_RETURN(const auto node, Optional(key));
  if (!node) return fallback;
  return node->String();
}

Result<bool> JsonNode::BoolOr(std::string_view key, bool fallback) const {
  PRIMEKV_ASSIGN_OR_RETURN(const auto node, Optional(key));
  if (!node) return fallback;
  return node->Bool();
}

Result<int64_t> JsonNode::IntegerOr(std::string_view key, int64_t fallback, int64_t lo,
                                    int64_t hi) const {
  PRIMEKV_ASSIGN_OR_RETURN(const auto node, Optional(key));
  if (!node) return fallback;
  return node->Integer(lo, hi);
}

Result<double> JsonNode::NumberOr(std::string_view key, double fallback) const {
  PRIMEKV_ASSIGN_OR_RETURN(const auto node, Optional(key));
  if (!node) return fallback;
  return node->Number();
}

}  // namespace primekv
