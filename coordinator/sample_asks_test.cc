#include "coordinator/sample_asks.h"

#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

SampleAsk AskOf(const std::string& job_id) {
  SampleAsk ask;
  ask.set_job_id(job_id);
  ask.set_path("/ck/" + job_id);
  return ask;
}

struct Heard {
  std::optional<absl::StatusOr<SampleDrawn>> result;
  SampleAsks::Done Callback() {
    return [this](absl::StatusOr<SampleDrawn> r) { result = std::move(r); };
  }
};

bool Live(const std::string&) { return true; }

TEST(SampleAsks, AnAskGoesOnceToItsWorkerAndEndsWithItsAnswer) {
  SampleAsks asks;
  Heard heard;
  EXPECT_TRUE(asks.empty());
  ASSERT_TRUE(asks.Ask("w1", AskOf("job-000001"), kT0 + absl::Minutes(1), heard.Callback()).ok());
  EXPECT_FALSE(asks.empty());
  EXPECT_THAT(asks.ForWorker("w2"), SizeIs(0));
  std::vector<SampleAsk> sent = asks.ForWorker("w1");
  ASSERT_THAT(sent, SizeIs(1));
  EXPECT_EQ(sent[0].job_id(), "job-000001");
  EXPECT_FALSE(sent[0].ask_id().empty());
  EXPECT_THAT(asks.ForWorker("w1"), SizeIs(0));  // once

  SampleDrawn drawn;
  drawn.set_ask_id(sent[0].ask_id());
  drawn.set_text("To be or");
  EXPECT_FALSE(asks.Answer("w2", drawn));  // not the worker asked
  EXPECT_FALSE(heard.result.has_value());
  EXPECT_TRUE(asks.Answer("w1", drawn));
  ASSERT_TRUE(heard.result.has_value());
  ASSERT_TRUE(heard.result->ok());
  EXPECT_EQ((*heard.result)->text(), "To be or");
  EXPECT_TRUE(asks.empty());
  EXPECT_FALSE(asks.Answer("w1", drawn));  // a heartbeat sent again
}

TEST(SampleAsks, AWorkerTakesTwoAtATime) {
  SampleAsks asks;
  Heard a, b, c;
  ASSERT_TRUE(asks.Ask("w1", AskOf("job-000001"), kT0, a.Callback()).ok());
  ASSERT_TRUE(asks.Ask("w1", AskOf("job-000002"), kT0, b.Callback()).ok());
  absl::Status third = asks.Ask("w1", AskOf("job-000003"), kT0, c.Callback());
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(third.message(), HasSubstr("worker w1 is drawing 2 samples already"));
  EXPECT_TRUE(asks.Ask("w2", AskOf("job-000003"), kT0, c.Callback()).ok());
}

TEST(SampleAsks, AnAskEndsAtItsDeadlineOrWhenItsWorkerIsLost) {
  SampleAsks asks;
  Heard late, lost, waiting;
  ASSERT_TRUE(asks.Ask("w1", AskOf("job-000001"), kT0 + absl::Seconds(5), late.Callback()).ok());
  ASSERT_TRUE(asks.Ask("w2", AskOf("job-000002"), kT0 + absl::Minutes(5), lost.Callback()).ok());
  ASSERT_TRUE(asks.Ask("w3", AskOf("job-000003"), kT0 + absl::Minutes(5), waiting.Callback()).ok());
  asks.ForWorker("w1");
  asks.Expire(kT0 + absl::Seconds(4), Live);
  EXPECT_FALSE(late.result.has_value());
  asks.Expire(kT0 + absl::Seconds(5), [](const std::string& w) { return w != "w2"; });
  ASSERT_TRUE(late.result.has_value());
  EXPECT_EQ(late.result->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(late.result->status().message(),
              HasSubstr("worker w1 did not answer with the sample of job-000001 in time"));
  ASSERT_TRUE(lost.result.has_value());
  EXPECT_EQ(lost.result->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(lost.result->status().message(), HasSubstr("worker w2 was lost"));
  EXPECT_FALSE(waiting.result.has_value());
  Heard restarted, unsent;
  ASSERT_TRUE(
      asks.Ask("w4", AskOf("job-000004"), kT0 + absl::Minutes(5), restarted.Callback()).ok());
  asks.ForWorker("w4");
  ASSERT_TRUE(asks.Ask("w4", AskOf("job-000005"), kT0 + absl::Minutes(5), unsent.Callback()).ok());
  asks.EndSent("w4");  // a new session: the sent one is gone with its process
  ASSERT_TRUE(restarted.result.has_value());
  EXPECT_THAT(restarted.result->status().message(), HasSubstr("worker w4 restarted"));
  EXPECT_FALSE(unsent.result.has_value());
  EXPECT_THAT(asks.ForWorker("w4"), SizeIs(1));  // the new session gets it
  asks.EndAll("the coordinator is shutting down");
  ASSERT_TRUE(waiting.result.has_value());
  EXPECT_EQ(waiting.result->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(asks.empty());
}

}  // namespace
}  // namespace dtrain::coordinator
