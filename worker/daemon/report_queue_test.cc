#include "worker/daemon/report_queue.h"

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

ReportProgressRequest Step(const std::string& job_id, int64_t step) {
  ReportProgressRequest r;
  r.set_job_id(job_id);
  r.mutable_step()->set_step(step);
  return r;
}

JobOutcome Failed(const std::string& error) {
  JobOutcome o;
  o.set_error(error);
  return o;
}

// What the queue holds, front first: "s<step>", "outcome", or "log:<text>".
std::vector<std::string> Contents(ReportQueue& q) {
  std::vector<std::string> out;
  while (const ReportQueue::Pending* p = q.front()) {
    const ReportProgressRequest& r = p->request;
    if (r.has_step()) {
      out.push_back("s" + std::to_string(r.step().step()));
    } else if (r.has_outcome()) {
      out.push_back("outcome");
    } else {
      out.push_back("log:" + r.log().text());
    }
    q.PopIf(p->seq);
  }
  return out;
}

TEST(ReportQueue, ReportsComeOutInTheOrderTheyWereQueued) {
  ReportQueue q({100}, nullptr);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.front(), nullptr);
  q.Push(Step("job-000001", 1));
  q.Push(Step("job-000001", 2));
  q.PushOutcome("job-000001", Failed("boom"));
  EXPECT_EQ(q.size(), 3);
  EXPECT_THAT(Contents(q), ElementsAre("s1", "s2", "outcome"));
  EXPECT_TRUE(q.empty());
}

TEST(ReportQueue, PopIfLeavesAFrontThatIsNoLongerTheOneSent) {
  ReportQueue q({100}, nullptr);
  q.Push(Step("job-000001", 1));
  const uint64_t sent = q.front()->seq;
  q.DropJob("job-000001");  // e.g. cancelled while the report was on its way
  q.Push(Step("job-000002", 1));
  q.PopIf(sent);
  ASSERT_NE(q.front(), nullptr);
  EXPECT_EQ(q.front()->request.job_id(), "job-000002");
}

TEST(ReportQueue, AFullQueueDropsTheOldestStepAndWarnsOnceInTheJobsLog) {
  std::vector<std::string> logged;
  ReportQueue q({3}, [&](const std::string& line) { logged.push_back(line); });
  for (int step = 1; step <= 3; ++step) q.Push(Step("job-000001", step));
  q.Push(Step("job-000001", 4));  // drops s1, then queues the warning after s4
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_EQ(logged[0], "warning: report buffer full (3): dropping the oldest; 1 dropped so far");
  // The warning itself took the room of s2, and only the first drop of 1000 is announced.
  EXPECT_EQ(q.dropped(), 2);
  EXPECT_THAT(Contents(q), ElementsAre("s3", "s4",
                                       "log:report buffer full (3): dropping the oldest; 1 "
                                       "dropped so far"));
}

TEST(ReportQueue, AWarningIsALogLineOfItsJob) {
  std::vector<std::string> logged;
  ReportQueue q({100}, [&](const std::string& line) { logged.push_back(line); });
  q.Warn("job-000007", "stopping: worker stopped by SIGTERM");
  EXPECT_THAT(logged, ElementsAre("warning: stopping: worker stopped by SIGTERM"));
  ASSERT_NE(q.front(), nullptr);
  EXPECT_EQ(q.front()->request.job_id(), "job-000007");
  EXPECT_EQ(q.front()->request.log().severity(), LOG_WARNING);
  EXPECT_EQ(q.front()->request.log().text(), "stopping: worker stopped by SIGTERM");
}

TEST(ReportQueue, OutcomesAreNeverDroppedForRoom) {
  ReportQueue q({2}, nullptr);
  q.PushOutcome("job-000001", Failed("first"));
  q.PushOutcome("job-000002", Failed("second"));
  q.PushOutcome("job-000003", Failed("third"));  // outcomes may exceed the bound
  q.Push(Step("job-000004", 1));                 // no step to drop: kept as well
  EXPECT_EQ(q.dropped(), 0);
  EXPECT_THAT(Contents(q), ElementsAre("outcome", "outcome", "outcome", "s1"));
}

TEST(ReportQueue, DropJobRemovesOnlyThatJobsReports) {
  ReportQueue q({100}, nullptr);
  q.Push(Step("job-000001", 1));
  q.Push(Step("job-000002", 1));
  q.PushOutcome("job-000001", Failed("refused"));
  EXPECT_TRUE(q.HasJob("job-000001"));
  q.DropJob("job-000001");
  EXPECT_FALSE(q.HasJob("job-000001"));
  EXPECT_TRUE(q.HasJob("job-000002"));
  EXPECT_EQ(q.size(), 1);
}

// Every report is built here: text quoted from files and peers that is not UTF-8 is escaped, so
// the report parses at the coordinator (protobuf is the oracle).
TEST(ReportQueue, EveryReportIsBuiltWithValidUtf8) {
  ReportQueue q({100}, nullptr);
  ReportProgressRequest event;
  event.set_job_id("job-000001");
  event.set_event("checkpoint sealed at step 4: /ckpt/caf\xe9/step_00000004");
  q.Push(event);
  q.Warn("job-000001", "latest holds \xff\xfe");
  q.PushOutcome("job-000001", Failed("manifest entry \xc0\xaf../etc/shadow"));
  std::vector<std::string> texts;
  while (const ReportQueue::Pending* p = q.front()) {
    std::string wire;
    ASSERT_TRUE(p->request.SerializeToString(&wire));
    ReportProgressRequest parsed;
    ASSERT_TRUE(parsed.ParseFromString(wire)) << p->request.ShortDebugString();
    texts.push_back(parsed.has_outcome() ? parsed.outcome().error()
                    : parsed.has_log()   ? parsed.log().text()
                                         : parsed.event());
    q.PopIf(p->seq);
  }
  EXPECT_THAT(texts,
              ElementsAre("checkpoint sealed at step 4: /ckpt/caf\\xe9/step_00000004",
                          "latest holds \\xff\\xfe", "manifest entry \\xc0\\xaf../etc/shadow"));
}

TEST(ReportQueue, ReplaceFrontIfReplacesOnlyThatReportAndKeepsItValid) {
  ReportQueue q({100}, nullptr);
  q.PushOutcome("job-000001", Failed("long"));
  const uint64_t seq = q.front()->seq;
  ReportProgressRequest shorter;
  shorter.set_job_id("job-000001");
  *shorter.mutable_outcome() = Failed("short \x80");
  q.ReplaceFrontIf(seq + 1, shorter);  // not the front: nothing happens
  EXPECT_EQ(q.front()->request.outcome().error(), "long");
  q.ReplaceFrontIf(seq, shorter);
  EXPECT_EQ(q.front()->request.outcome().error(), "short \\x80");
  EXPECT_EQ(q.front()->seq, seq);
}

}  // namespace
}  // namespace dtrain::worker
