// CheckRunConfig's press records: a press name in an --out folder keeps the meaning (resolved
// text) its rows were made with, and rows without a record are not resumed.
#include "eval/run_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace primekv::eval_internal {
namespace {

using nlohmann::json;

const char* kOld = "primekv:combine=logit,key=self,rounds=one,value=wo_centered";
const char* kNew = "primekv:combine=logit,key=centerednext,rounds=one,value=wo_centered";

json Config(json presses) {
  json c = {{"format", "primekv-eval-config-1"},
            {"model", {{"path", "/m.gguf"}, {"size", 10}, {"hash", "00ff"}, {"scheme", "x"}}},
            {"settings", {{"mode", "context"}, {"seed", 42}}},
            {"tasks", {{"niah_single_1", "generated"}}}};
  if (!presses.is_null()) c["presses"] = std::move(presses);
  return c;
}

std::string Check(const json& recorded, const json& current, std::set<std::string> rows) {
  const Status s = CheckRunConfig(recorded, current, "runs/a", rows);
  return s.ok() ? "OK" : s.message();
}

TEST(RunConfigPresses, SameResolutionResumesAndNewPressesExtend) {
  const json recorded = Config({{"none", "none"}, {"primekv", kOld}});
  EXPECT_EQ(Check(recorded, recorded, {"none", "primekv"}), "OK");
  // A new press (no rows yet) is an extension, like a new task.
  const json more = Config({{"none", "none"}, {"primekv", kOld}, {"snapkv", "snapkv:kernel=5"}});
  EXPECT_EQ(Check(recorded, more, {"none", "primekv"}), "OK");
  // A subset of the recorded presses, too.
  EXPECT_EQ(Check(recorded, Config({{"none", "none"}}), {"none", "primekv"}), "OK");
  const json merged = MergeRunConfig(recorded, Config({{"snapkv", "snapkv:kernel=5"}}));
  EXPECT_EQ(merged["presses"],
            json({{"none", "none"}, {"primekv", kOld}, {"snapkv", "snapkv:kernel=5"}}));
}

TEST(RunConfigPresses, ChangedResolutionIsRefusedNamingBothTexts) {
  const json recorded = Config({{"none", "none"}, {"primekv", kOld}});
  const json current = Config({{"none", "none"}, {"primekv", kNew}});
  const std::string e = Check(recorded, current, {"none", "primekv"});
  EXPECT_NE(e.find("--out runs/a holds results made with press primekv resolved as \"" +
                   std::string(kOld) + "\", and it now resolves as \"" + kNew + "\""),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("use a new --out folder"), std::string::npos) << e;
  // Refused even before any row of the press is written: the record is the folder's meaning.
  EXPECT_NE(Check(recorded, current, {}), "OK");
}

TEST(RunConfigPresses, LegacyFolderWithRowsOfARunPressIsRefused) {
  const json legacy = Config(json());  // config.json from before presses were recorded
  const json current = Config({{"none", "none"}, {"primekv", kNew}});
  const std::string e = Check(legacy, current, {"none", "primekv"});
  EXPECT_NE(e.find("--out runs/a has rows of press primekv but no record"), std::string::npos) << e;
  EXPECT_NE(e.find(std::string("now resolves as \"") + kNew + "\""), std::string::npos) << e;
  EXPECT_NE(e.find("verify_eval_rows.py"), std::string::npos) << e;
  // Rows of other presses only, or of "none" (no parameters): resumable, and recorded.
  EXPECT_EQ(Check(legacy, current, {"none", "keydiff"}), "OK");
  EXPECT_EQ(Check(legacy, current, {}), "OK");
  const json merged = MergeRunConfig(legacy, current);
  EXPECT_EQ(merged["presses"], current["presses"]);
  // That record covers this run's presses only: the keydiff rows stay unrecorded and are
  // refused when a later run names keydiff.
  const json later = Config({{"none", "none"}, {"keydiff", "keydiff"}});
  const std::string e2 = Check(merged, later, {"none", "primekv", "keydiff"});
  EXPECT_NE(e2.find("has rows of press keydiff but no record"), std::string::npos) << e2;
}

TEST(RunConfigPresses, SettingsAreStillCheckedFirst) {
  const json recorded = Config({{"primekv", kOld}});
  json current = Config({{"primekv", kNew}});
  current["settings"]["seed"] = 7;
  const std::string e = Check(recorded, current, {"primekv"});
  EXPECT_NE(e.find("another --seed (42; now 7)"), std::string::npos) << e;
}

}  // namespace
}  // namespace primekv::eval_internal
