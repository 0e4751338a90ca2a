#include "worker/daemon/sample_drawer.h"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/path_policy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "worker/model/checkpoint.h"
#include "worker/model/gpt_stage.h"
#include "worker/model/init.h"

namespace dtrain::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

// A byte-level model (V = 256) of one layer, GPT-2's initialization, as safetensors in `dir`.
std::string TinyModel(const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/model.safetensors";
  model::GptConfig config{
      .vocab_size = 256, .context = 16, .n_layer = 1, .n_head = 2, .n_embd = 32};
  auto backend = kernels::CreateBackend("cpu", 1).value();
  auto stage = model::GptStage::Create(backend.get(), config, {0, config.n_layer}, {}).value();
  EXPECT_TRUE(model::InitializeGpt2(*stage, 7).ok());
  EXPECT_TRUE(model::SaveTensors(path, *stage, stage->params(), {}).ok());
  return path;
}

SampleAsk AskFor(const std::string& path, const std::string& id = "sample-1") {
  SampleAsk ask;
  ask.set_ask_id(id);
  ask.set_job_id("job-000001");
  ask.set_path(path);
  ask.set_n_head(2);
  ask.mutable_parameters()->set_prompt("ab");
  ask.mutable_parameters()->set_tokens(5);
  ask.mutable_parameters()->set_temperature(0);
  ask.set_deadline_unix_ms(absl::ToUnixMillis(absl::Now() + absl::Minutes(1)));
  return ask;
}

const std::string& Root() {
  static const std::string* root = new std::string(::testing::TempDir() + "/roots");
  return *root;
}

std::vector<std::string> Roots() {
  std::filesystem::create_directories(Root());
  return ResolveRoots({Root()}).value();
}

TEST(SampleDrawer, DrawsFromAPathInsideTheRoots) {
  const std::string path = TinyModel(Root() + "/job-000001");
  SampleDrawn drawn = SampleDrawer::Draw(AskFor(path), Roots(), {.device = "cpu", .threads = 1});
  EXPECT_EQ(drawn.error_code(), 0) << drawn.error();
  EXPECT_EQ(drawn.ask_id(), "sample-1");
  EXPECT_THAT(drawn.prompt_tokens(), ::testing::ElementsAre('a', 'b'));
  EXPECT_THAT(drawn.tokens(), SizeIs(5));
  EXPECT_EQ(drawn.text().substr(0, 2), "ab");
  // The same ask again: the same draw (greedy, and seeded).
  SampleDrawn again = SampleDrawer::Draw(AskFor(path), Roots(), {.device = "cpu", .threads = 1});
  EXPECT_THAT(again.tokens(), ::testing::ElementsAreArray(drawn.tokens()));
}

TEST(SampleDrawer, RefusesAPathOutsideTheRootsWithoutReadingIt) {
  const std::string outside = TinyModel(::testing::TempDir() + "/elsewhere");
  for (const std::string& path :
       {outside, std::string("/etc/passwd"), Root() + "/../elsewhere/model.safetensors"}) {
    SampleDrawn drawn = SampleDrawer::Draw(AskFor(path), Roots(), {.device = "cpu"});
    EXPECT_EQ(drawn.error_code(), static_cast<int>(absl::StatusCode::kPermissionDenied)) << path;
    EXPECT_THAT(drawn.tokens(), SizeIs(0));
  }
  // A symlink inside the roots that leads out is refused the same way.
  std::filesystem::create_symlink(outside, Root() + "/link.safetensors");
  SampleDrawn drawn =
      SampleDrawer::Draw(AskFor(Root() + "/link.safetensors"), Roots(), {.device = "cpu"});
  EXPECT_EQ(drawn.error_code(), static_cast<int>(absl::StatusCode::kPermissionDenied));
}

TEST(SampleDrawer, AMissingCheckpointAPastDeadlineAndARefusalAreAnswers) {
  SampleDrawn missing =
      SampleDrawer::Draw(AskFor(Root() + "/job-000009/model.safetensors"), Roots(), {});
  EXPECT_EQ(missing.error_code(), static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_THAT(missing.error(), HasSubstr("no checkpoint at"));

  const std::string path = TinyModel(Root() + "/job-000002");
  SampleAsk late = AskFor(path);
  late.set_deadline_unix_ms(absl::ToUnixMillis(absl::Now() - absl::Seconds(1)));
  SampleDrawn past = SampleDrawer::Draw(late, Roots(), {.device = "cpu", .threads = 1});
  EXPECT_EQ(past.error_code(), static_cast<int>(absl::StatusCode::kDeadlineExceeded));

  SampleSetup budget{.device = "cpu", .threads = 1};
  int64_t asked_bytes = 0;
  budget.admit = [&](const model::GptConfig& config) {
    asked_bytes = SampleMemoryBytes(config);
    return absl::ResourceExhaustedError("past its memory budget");
  };
  SampleDrawn refused = SampleDrawer::Draw(AskFor(path), Roots(), budget);
  EXPECT_EQ(refused.error_code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
  EXPECT_GT(asked_bytes, 4 * 2 * 256 * 32);  // at least wte twice
}

// Queued on its own thread, each ask drawn once, its answer kept until delivered.
TEST(SampleDrawer, EachAskIsDrawnOnceAndKeptUntilDelivered) {
  const std::string path = TinyModel(Root() + "/job-000003");
  absl::Notification answered;
  SampleDrawer drawer(Roots(), {.device = "cpu", .threads = 1}, [&] {
    if (!answered.HasBeenNotified()) answered.Notify();
  });
  drawer.Queue(AskFor(path, "sample-7"));
  drawer.Queue(AskFor(path, "sample-7"));  // a heartbeat answer seen twice
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(30)));
  absl::SleepFor(absl::Milliseconds(200));  // a second draw, if there were one, is done by now
  std::vector<SampleDrawn> answers = drawer.Answers();
  ASSERT_THAT(answers, SizeIs(1));
  EXPECT_EQ(answers[0].ask_id(), "sample-7");
  EXPECT_THAT(drawer.Answers(), SizeIs(1));  // until delivered
  drawer.Queue(AskFor(path, "sample-7"));    // asked again before delivery: not drawn again
  drawer.Delivered(1);
  EXPECT_THAT(drawer.Answers(), SizeIs(0));
  drawer.Stop();
  drawer.Queue(AskFor(path, "sample-8"));  // stopping: dropped
  EXPECT_THAT(drawer.Answers(), SizeIs(0));
}

}  // namespace
}  // namespace dtrain::worker
