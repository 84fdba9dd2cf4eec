// libFuzzer target for the press-spec parser: any text must either give a press or a Status,
// in time and memory linear in its length; a parsed spec must print back to a spec that parses
// to the same thing.
#include <cstddef>
#include <cstdint>
#include <string>

#include "primekv/press/press.h"

namespace primekv {
namespace {

void CheckSpec(const std::string& text) {
  auto spec = ParsePressSpec(text);
  if (!spec.ok()) {
    Check(!spec.message().empty(), "a failed parse explains itself");
    return;
  }
  Check(!spec->name.empty(), "a parsed press has a name");
  auto again = ParsePressSpec(spec->Text());
  Check(again.ok(), "Text() of a parsed spec parses");
  Check(again->name == spec->name && again->params == spec->params, "Text() round-trips");
  auto press = MakePress(*spec);
  if (press.ok()) {
    Check(!press->name.empty(), "a made press has a name");
  } else {
    Check(!press.message().empty(), "a failed press explains itself");
  }
}

}  // namespace
}  // namespace primekv

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  primekv::CheckSpec(text);
  auto list = primekv::SplitPressList(text);
  if (list.ok()) {
    for (const std::string& item : *list) {
      primekv::Check(!item.empty(), "no empty list entries");
      primekv::CheckSpec(item);
    }
  }
  return 0;
}
