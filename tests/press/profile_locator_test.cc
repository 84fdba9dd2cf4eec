// profile=auto: the profile beside the model file, else the cache entry named by the file's
// SHA-256 under XDG_CACHE_HOME, else an error naming the command that makes one; nest=0.9 is
// added unless given, inside a budget wrapper too.
#include "primekv/press/profile_locator.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "primekv/press/press.h"

namespace primekv {
namespace {

TEST(ProfileLocator, BesideThenCacheThenTheCommand) {
  const auto dir = std::filesystem::temp_directory_path() / "primekv_profile_locator_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "cache");
  const auto model = dir / "m.gguf";
  std::ofstream(model) << "abc";
  ASSERT_EQ(setenv("XDG_CACHE_HOME", (dir / "cache").c_str(), 1), 0);
  EXPECT_EQ(ProfileBesideModel(model), dir / "m.budget.json");

  auto none = ResolveAutoProfile("primekv:profile=auto", model);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.message().find("primekv calibrate -m " + model.string()), std::string::npos)
      << none.message();

  // FIPS 180-4's digest of "abc".
  const auto cached =
      dir / "cache" / "primekv" / "profiles" /
      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad.budget.json";
  std::filesystem::create_directories(cached.parent_path());
  std::ofstream(cached) << "{}";
  EXPECT_EQ(*ResolveAutoProfile("primekv:profile=auto", model),
            "primekv:nest=0.9,profile=" + cached.string());
  EXPECT_EQ(*ResolveAutoProfile("keydiff:nest=0.5,profile=auto", model),
            "keydiff:nest=0.5,profile=" + cached.string());
  EXPECT_EQ(*ResolveAutoProfile("adakv:keydiff:profile=auto", model),
            "adakv:keydiff:nest=0.9,profile=" + cached.string());

  std::ofstream(dir / "m.budget.json") << "{}";
  EXPECT_EQ(*ResolveAutoProfile("primekv:profile=auto", model),
            "primekv:nest=0.9,profile=" + (dir / "m.budget.json").string());

  // Other presses pass unchanged, without a look for the file.
  EXPECT_EQ(*ResolveAutoProfile("keydiff", "/nonexistent.gguf"), "keydiff");
  EXPECT_EQ(*ResolveAutoProfile("knorm:profile=/x.json", "/nonexistent.gguf"),
            "knorm:profile=/x.json");
  EXPECT_TRUE(UsesAutoProfile("primekv:profile=auto"));
  EXPECT_TRUE(UsesAutoProfile("adakv:keydiff:profile=auto"));
  EXPECT_FALSE(UsesAutoProfile("primekv:profile=/auto.json"));
  EXPECT_FALSE(UsesAutoProfile("primekv"));
  // A press made without a model cannot find it.
  auto made = MakePress(*ParsePressSpec("primekv:profile=auto"));
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.message().find("profile=auto"), std::string::npos) << made.message();
  unsetenv("XDG_CACHE_HOME");
  std::filesystem::remove_all(dir);
}

TEST(ProfileLocator, AModelFilesHashIsRememberedUnderItsPathSizeAndTime) {
  const auto dir = std::filesystem::temp_directory_path() / "primekv_profile_locator_hash";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ASSERT_EQ(setenv("XDG_CACHE_HOME", (dir / "cache").c_str(), 1), 0);
  const auto model = dir / "m.gguf";
  std::ofstream(model) << "abc";
  const std::string abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
  EXPECT_EQ(*ModelFileSha256(model), abc);
  // The remembered digest is what a second call returns (made wrong here to tell it apart)...
  std::vector<std::filesystem::path> memos;
  for (const auto& e :
       std::filesystem::directory_iterator(dir / "cache" / "primekv" / "profiles" / "files"))
    memos.push_back(e.path());
  ASSERT_EQ(memos.size(), 1u);
  const std::string wrong(64, 'f');
  std::ofstream(memos[0]) << wrong;
  EXPECT_EQ(*ModelFileSha256(model), wrong);
  // ...unless asked to read the file again, or the file's size changed.
  EXPECT_EQ(*ModelFileSha256(model, /*fresh=*/true), abc);
  std::ofstream(model) << "abcd";
  EXPECT_EQ(*ModelFileSha256(model),
            "88d4266fd4e6338d13b845fcf289579d209c897823b9217da3e161936f031589");
  unsetenv("XDG_CACHE_HOME");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace primekv
