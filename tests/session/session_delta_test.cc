// Append-only session files (session/session_file.h): after the first save a turn appends a delta
// (the entries compression removed, the entries and tokens the turn added), and the file reads
// back bit for bit as the conversation holds it; a delta's size follows the turn, not the
// conversation; a truncation rewinds; deltas past the base's size rewrite the file whole; a
// write cut short, or a process killed while writing, leaves the last complete turn.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <thread>

#include "common/random_models.h"
#include "primekv/model/random_model.h"
#include "primekv/press/compressor.h"
#include "primekv/session/conversation.h"
#include "primekv/session/session_file.h"

namespace primekv {
namespace {

class SessionDeltaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() /
           ("primekv_session_delta_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    ASSERT_TRUE(WriteRandomModel(SessionFileSpec(), dir_ / "m.gguf").ok());
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }

  void SetUp() override {
    auto m = Model::Load(dir_ / "m.gguf");
    ASSERT_TRUE(m.ok()) << m.message();
    model_.emplace(std::move(m).value());
    compressor_.emplace(*model_, std::move(MakePress(*ParsePressSpec("primekv"))).value());
  }

  // A multi-turn conversation at ratio 0.5 over `context` tokens, compressed once.
  std::unique_ptr<Conversation> Start(const std::string& id, int context, KvDType t) {
    ConversationRecord r{
        .id = id, .press = "primekv", .schedule = {.ratio = 0.5, .mode = ScheduleMode::kMultiTurn}};
    auto conv = std::make_unique<Conversation>(*model_, *compressor_, pool_, std::move(r),
                                               KvCacheOptions{.dtype = t});
    std::vector<Token> tokens(static_cast<size_t>(context));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<Token>(3 + i * 7 % 500);
    EXPECT_TRUE(conv->PrefillContext(tokens).ok());
    return conv;
  }
  // One turn: `n` tokens through the model, then the turn's compression back to the budget.
  static void Turn(Conversation& conv, int n, int seed) {
    std::vector<Token> tokens(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) tokens[i] = static_cast<Token>(5 + (seed * 31 + i * 13) % 500);
    ASSERT_TRUE(conv.Prefill(tokens).ok());
    ASSERT_TRUE(conv.EndTurn().ok());
  }
  std::string Path(const std::string& id) const { return (dir_ / (id + ".pkvs")).string(); }

  static std::filesystem::path dir_;
  std::optional<Model> model_;
  std::optional<Compressor> compressor_;
  ThreadPool pool_{1};
};
std::filesystem::path SessionDeltaTest::dir_;

// `r` holds exactly what `want` does: fields, tokens, and every head's rows as stored.
void ExpectSameRecord(const ConversationRecord& r, const ConversationRecord& want) {
  EXPECT_EQ(r.turn, want.turn);
  EXPECT_EQ(r.budget, want.budget);
  EXPECT_EQ(r.last_prompt_len, want.last_prompt_len);
  EXPECT_EQ(r.tokens, want.tokens);
  ASSERT_TRUE(r.cache && want.cache);
  EXPECT_EQ(r.cache->NextPosition(), want.cache->NextPosition());
  for (int l = 0; l < want.cache->n_layers(); ++l) {
    for (int h = 0; h < want.cache->n_kv_heads(); ++h) {
      std::vector<uint8_t> k1, v1, k2, v2;
      std::vector<int32_t> p1, p2;
      r.cache->ReadHeadRaw(l, h, &k1, &v1, &p1);
      want.cache->ReadHeadRaw(l, h, &k2, &v2, &p2);
      EXPECT_EQ(p1, p2) << "layer " << l << " head " << h;
      EXPECT_TRUE(k1 == k2 && v1 == v2) << "layer " << l << " head " << h;
    }
  }
}

TEST_F(SessionDeltaTest, TurnsAppendDeltasThatReadBackExactly) {
  for (KvDType t : {KvDType::kF16, KvDType::kQ8_0}) {
    SCOPED_TRACE(KvDTypeName(t));
    const std::string id = std::string("turns_") + KvDTypeName(t);
    auto conv = Start(id, 300, t);
    ASSERT_TRUE(conv->Save(dir_.string()).ok());
    const auto base = std::filesystem::file_size(Path(id));
    for (int turn = 1; turn <= 4; ++turn) {
      Turn(*conv, 24, turn);
      const auto before = std::filesystem::file_size(Path(id));
      ASSERT_TRUE(conv->Save(dir_.string()).ok());
      ASSERT_TRUE(conv->stored());
      EXPECT_EQ(conv->stored()->extent.deltas, turn);
      EXPECT_EQ(conv->stored()->extent.base_bytes, base);
      const auto grew = std::filesystem::file_size(Path(id)) - before;
      EXPECT_LT(grew, base / 4) << "a turn of 24 tokens appends far less than the whole file";
      ImageExtent e;
      auto back = ReadSessionFile(Path(id), *model_, {.dtype = t}, false, &e);
      ASSERT_TRUE(back.ok()) << back.message();
      EXPECT_EQ(e.deltas, turn);
      EXPECT_EQ(e.torn_bytes, 0u);
      ExpectSameRecord(*back, conv->record());
      auto header = ReadSessionFile(Path(id), *model_, {.dtype = t}, true);
      ASSERT_TRUE(header.ok()) << header.message();
      EXPECT_EQ(header->tokens, conv->tokens());
      EXPECT_EQ(header->turn, conv->record().turn);
    }
  }
}

// What a turn appends is what the turn changed, bounded by the turn's tokens, for a 200-token
// and a 1,600-token conversation alike, while their bases differ eightfold.
TEST_F(SessionDeltaTest, DeltaSizeFollowsTheTurnNotTheConversation) {
  std::vector<uint64_t> base, delta;
  for (int context : {200, 1600}) {
    const std::string id = "len_" + std::to_string(context);
    auto conv = Start(id, context, KvDType::kF16);
    ASSERT_TRUE(conv->Save(dir_.string()).ok());
    base.push_back(std::filesystem::file_size(Path(id)));
    Turn(*conv, 32, 1);
    ASSERT_TRUE(conv->Save(dir_.string()).ok());
    ASSERT_EQ(conv->stored()->extent.deltas, 1);
    delta.push_back(std::filesystem::file_size(Path(id)) - base.back());
  }
  EXPECT_GT(base[1], 6 * base[0]);
  // Per head at most the turn's 32 entries added (4 + 2 x 64 bytes each, f16 rows of 32) and 32
  // removed (a row number each); then the 32 tokens and a header. Which entries compression
  // drops differs between the two, so the sizes do too, but never past this bound.
  const uint64_t bound = 4 * (32 * (132 + 4) + 8) + 32 * 4 + 1024;
  EXPECT_LE(delta[0], bound);
  EXPECT_LE(delta[1], bound);
  EXPECT_LT(delta[1], base[1] / 20);
}

// A truncation (a regenerated answer) rewinds: entries at or after the cut are replaced even
// when the same tokens come back.
TEST_F(SessionDeltaTest, TruncationRewritesWhatFollowsTheCut) {
  const std::string id = "rewind";
  auto conv = Start(id, 200, KvDType::kF16);
  Turn(*conv, 20, 1);
  ASSERT_TRUE(conv->Save(dir_.string()).ok());
  const std::vector<Token> before = conv->tokens();
  conv->TruncateTo(190);
  ASSERT_TRUE(conv->Prefill(std::span(before).subspan(190)).ok());  // the same tokens again
  ASSERT_TRUE(conv->EndTurn().ok());
  ASSERT_TRUE(conv->Save(dir_.string()).ok());
  EXPECT_EQ(conv->stored()->extent.deltas, 1);
  auto back = ReadSessionFile(Path(id), *model_, {}, false);
  ASSERT_TRUE(back.ok()) << back.message();
  ExpectSameRecord(*back, conv->record());
}

TEST_F(SessionDeltaTest, DeltasPastTheBaseRewriteTheFileWhole) {
  const std::string id = "compact";
  auto conv = Start(id, 100, KvDType::kF16);
  ASSERT_TRUE(conv->Save(dir_.string()).ok());
  bool rewritten = false;
  for (int turn = 1; turn <= 12 && !rewritten; ++turn) {
    Turn(*conv, 40, turn);
    ASSERT_TRUE(conv->Save(dir_.string()).ok());
    const ImageExtent& e = conv->stored()->extent;
    EXPECT_LE(e.bytes - e.base_bytes, e.base_bytes);
    rewritten = turn > 1 && e.deltas == 0;
  }
  EXPECT_TRUE(rewritten) << "40-token turns over a 50-entry budget outgrow the base";
  auto back = ReadSessionFile(Path(id), *model_, {}, false);
  ASSERT_TRUE(back.ok()) << back.message();
  ExpectSameRecord(*back, conv->record());
}

// A file replaced by another writer (a rename) is not appended to: the save writes it whole.
TEST_F(SessionDeltaTest, AReplacedFileIsWrittenWhole) {
  const std::string id = "replaced";
  auto conv = Start(id, 120, KvDType::kF16);
  ASSERT_TRUE(conv->Save(dir_.string()).ok());
  auto other = Start(id, 60, KvDType::kF16);
  ASSERT_TRUE(other->Save(dir_.string()).ok());  // the same name, another conversation
  Turn(*conv, 10, 1);
  ASSERT_TRUE(conv->Save(dir_.string()).ok());
  EXPECT_EQ(conv->stored()->extent.deltas, 0);
  auto back = ReadSessionFile(Path(id), *model_, {}, false);
  ASSERT_TRUE(back.ok()) << back.message();
  ExpectSameRecord(*back, conv->record());
}

// A copy of the conversation's record, with its cache.
ConversationRecord Snapshot(const Conversation& conv) {
  const ConversationRecord& r = conv.record();
  return {.id = r.id,
          .tenant = r.tenant,
          .cache_salt = r.cache_salt,
          .press = r.press,
          .schedule = r.schedule,
          .budget = r.budget,
          .last_prompt_len = r.last_prompt_len,
          .turn = r.turn,
          .tokens = r.tokens,
          .cache = r.cache->Clone()};
}

struct Turns {
  std::vector<std::string> writes;  // the bytes each save wrote, in order
  std::vector<bool> delta;
  std::vector<ConversationRecord> states;  // the record after each save
};

// The file cut at 50 random points of its last delta (a write cut short) loads the turn before
// it, exactly; the next save cuts the torn tail and appends.
TEST_F(SessionDeltaTest, ATornDeltaLeavesTheLastCompleteTurn) {
  const std::string id = "torn";
  auto conv = Start(id, 200, KvDType::kF16);
  ASSERT_TRUE(conv->Save(dir_.string()).ok());
  Turn(*conv, 16, 1);
  ASSERT_TRUE(conv->Save(dir_.string()).ok());
  const ConversationRecord turn1 = Snapshot(*conv);
  const uint64_t complete = std::filesystem::file_size(Path(id));
  Turn(*conv, 16, 2);
  ASSERT_TRUE(conv->Save(dir_.string()).ok());
  const uint64_t full = std::filesystem::file_size(Path(id));
  std::ifstream in(Path(id), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::mt19937 rng(7);
  for (int i = 0; i < 50; ++i) {
    const uint64_t cut = complete + rng() % (full - complete);
    std::ofstream(Path(id), std::ios::binary | std::ios::trunc)
        .write(bytes.data(), static_cast<std::streamsize>(cut));
    ImageExtent e;
    auto back = ReadSessionFile(Path(id), *model_, {}, false, &e);
    ASSERT_TRUE(back.ok()) << "cut at " << cut << ": " << back.message();
    EXPECT_EQ(e.bytes, complete);
    EXPECT_EQ(e.torn_bytes, cut - complete);
    ExpectSameRecord(*back, turn1);
  }
  // Loaded from the torn file, the conversation's next save overwrites the tail.
  ImageExtent e;
  auto back = ReadSessionFile(Path(id), *model_, {}, false, &e);
  ASSERT_TRUE(back.ok());
  Conversation again(*model_, *compressor_, pool_, std::move(back).value());
  again.SetStored(DescribeStored(again.record(), Path(id), e));
  Turn(again, 16, 3);
  ASSERT_TRUE(again.Save(dir_.string()).ok());
  EXPECT_EQ(again.stored()->extent.deltas, 2);
  auto last = ReadSessionFile(Path(id), *model_, {}, false);
  ASSERT_TRUE(last.ok()) << last.message();
  ExpectSameRecord(*last, again.record());
}

// kill -9 at random points of a writer that saves turn after turn (deltas and whole rewrites,
// each fsynced): 50 times, the file always loads as one of the complete turns, exactly.
TEST_F(SessionDeltaTest, KilledWritersLeaveACompleteTurn) {
  const std::string id = "killed";
  auto conv = Start(id, 600, KvDType::kF16);
  Turns plan;
  for (int turn = 0; turn < 24; ++turn) {
    if (turn > 0) Turn(*conv, 48, turn);
    auto w = conv->NextWrite(Path(id));
    ASSERT_TRUE(w.ok()) << w.message();
    plan.writes.push_back(w->bytes);
    plan.delta.push_back(w->delta);
    conv->Stored(*w, Path(id));
    plan.states.push_back(Snapshot(*conv));
  }
  ASSERT_GT(std::count(plan.delta.begin(), plan.delta.end(), true), 10);
  ASSERT_GT(std::count(plan.delta.begin(), plan.delta.end(), false), 1);
  std::mt19937 rng(11);
  int mid_turn = 0;
  for (int kill = 0; kill < 50; ++kill) {
    std::filesystem::remove(Path(id));
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // The child writes what Conversation::Save writes, turn after turn, forever.
      StoredImage stored;
      for (size_t i = 0;; i = (i + 1) % plan.writes.size()) {
        if (i == 0 || !plan.delta[i]) {
          if (!WriteSessionImage(dir_.string(), id, plan.writes[i]).ok()) ::_exit(2);
          stored.extent = {.bytes = plan.writes[i].size(), .appendable = true};
        } else {
          if (!AppendSessionDelta(dir_.string(), id, plan.writes[i], stored).ok()) ::_exit(3);
          stored.extent.bytes += plan.writes[i].size();
        }
        stored.extent.last_sum = RecordChecksum(plan.writes[i]);
      }
    }
    while (!std::filesystem::exists(Path(id))) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer failed by itself: " << status;
    auto back = ReadSessionFile(Path(id), *model_, {}, false);
    ASSERT_TRUE(back.ok()) << "kill " << kill << ": " << back.message();
    ASSERT_LT(back->turn, plan.states.size());
    ExpectSameRecord(*back, plan.states[back->turn]);
    mid_turn += back->turn > 0;
  }
  EXPECT_GT(mid_turn, 25) << "most kills should land after the first turn";
}

}  // namespace
}  // namespace primekv
