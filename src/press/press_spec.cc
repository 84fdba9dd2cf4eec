// The press spec grammar: "name", "name:key=value,...", a budget wrapper over one press
// ("adakv:snapkv"), and lists of specs. The presses themselves are the table in registry.cc.
#include "press/press_spec.h"

#include <algorithm>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "primekv/util/text.h"

namespace primekv {

namespace press_internal {

// User text echoed in messages: printable ASCII only, bounded length.
std::string Shown(std::string_view s) { return Printable(s, 60); }

// The budget wrapper row whose prefix is `name` ("adakv"), if any.
const PressEntry* FindWrapper(std::span<const PressEntry> table, std::string_view name) {
  for (const PressEntry& e : table) {
    if (!e.wraps.empty() && e.wraps == name) return &e;
  }
  return nullptr;
}

std::string NeedsInner(std::string_view w) {
  const std::string s(w);
  return "press " + s + " needs an inner press: " + s + ":<press>, e.g. " + s + ":snapkv";
}

}  // namespace press_internal

namespace {

using press_internal::FindWrapper;
using press_internal::NeedsInner;
using press_internal::Shown;

std::string Trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t");
  return b == std::string_view::npos ? "" : std::string(s.substr(b, e - b + 1));
}

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '<' || c == '>';
}

}  // namespace

std::string PressSpec::Text() const {
  if (FindWrapper(PressTable(), name)) {
    auto it = params.find("of");
    return name + ":" + (it == params.end() ? std::string() : it->second);
  }
  std::string s = name;
  char sep = ':';
  for (const auto& [k, v] : params) {
    s += sep + k + "=" + v;
    sep = ',';
  }
  return s;
}

Result<PressSpec> ParsePressSpec(const std::string& text_in) {
  // Iterative: a budget wrapper ("adakv:") may prefix one press; anything deeper is refused
  // before any copy, so a long "adakv:adakv:..." costs linear time and memory.
  std::string_view text = text_in;
  const PressEntry* wrapper = nullptr;
  for (;;) {
    const std::string head = Trim(text.substr(0, std::min(text.find(':'), text.size())));
    const PressEntry* w = FindWrapper(PressTable(), head);
    if (w == nullptr) break;
    if (wrapper) {
      return Status::Error("press '" + std::string(wrapper->wraps) + ":" + head +
                           "...': " + std::string(wrapper->wraps) + " cannot wrap " + head);
    }
    wrapper = w;
    const auto colon = text.find(':');
    if (colon == std::string_view::npos) return Status::Error(NeedsInner(head));
    text = text.substr(colon + 1);
  }
  const std::string shown = Shown(text_in);
  PressSpec spec;
  const auto colon = text.find(':');
  spec.name = Trim(text.substr(0, std::min(colon, text.size())));
  if (spec.name == "streaming_llm") spec.name = "streamingllm";
  if (spec.name.empty()) {
    return Status::Error(wrapper ? NeedsInner(wrapper->wraps)
                                 : "press '" + shown + "': empty press name");
  }
  for (char c : spec.name) {
    if (!IsNameChar(c)) return Status::Error("press '" + shown + "': bad press name");
  }
  if (colon != std::string_view::npos) {
    const std::string_view rest = text.substr(colon + 1);
    size_t start = 0;
    while (start <= rest.size()) {
      const auto comma = rest.find(',', start);
      const std::string item =
          Trim(rest.substr(start, comma == std::string_view::npos ? rest.npos : comma - start));
      const auto eq = item.find('=');
      if (eq == std::string::npos || eq == 0) {
        return Status::Error("press '" + shown + "': parameter '" + Shown(item) +
                             "' is not key=value");
      }
      const std::string key = Trim(item.substr(0, eq));
      const std::string value = Trim(item.substr(eq + 1));
      if (value.empty())
        return Status::Error("press '" + shown + "': parameter '" + Shown(key) + "' has no value");
      if (key == "of") return Status::Error("press '" + shown + "': 'of' is not a parameter");
      if (!spec.params.emplace(key, value).second) {
        return Status::Error("press '" + shown + "': parameter '" + Shown(key) + "' given twice");
      }
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
  }
  if (wrapper) {
    PressSpec outer;
    outer.name = std::string(wrapper->wraps);
    outer.params["of"] = spec.Text();
    return outer;
  }
  return spec;
}

Result<std::vector<std::string>> SplitPressList(std::string_view text) {
  std::vector<std::string> out;
  const bool semicolons = text.find(';') != std::string_view::npos;
  const char sep = semicolons ? ';' : ',';
  size_t start = 0;
  while (start <= text.size()) {
    const auto end = std::min(text.find(sep, start), text.size());
    const std::string item = Trim(text.substr(start, end - start));
    // "a:k=v,k2=v2,b": an item that is key=value (no ':' before its '=') continues the previous
    // press's parameters, so comma lists stay unambiguous for multi-parameter presses.
    const auto eq = item.find('=');
    const bool continues = !semicolons && eq != std::string::npos && item.find(':') > eq;
    if (item.empty()) {
      return Status::Error("press list '" + Shown(text) + "' has an empty entry");
    } else if (continues) {
      if (out.empty() || out.back().find(':') == std::string::npos) {
        return Status::Error("press list '" + Shown(text) + "': parameter '" + Shown(item) +
                             "' follows no press (write NAME:" + Shown(item) + ")");
      }
      out.back() += "," + item;
    } else {
      out.push_back(item);
    }
    start = end + 1;
  }
  return out;
}

}  // namespace primekv
