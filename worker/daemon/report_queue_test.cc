#include "worker/daemon/report_queue.h"

#include <algorithm>
#include <optional>
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
    } else if (r.has_checkpoint()) {
      out.push_back("sealed" + std::to_string(r.checkpoint().step()));
    } else if (r.has_event()) {
      out.push_back("event:" + r.event());
    } else {
      out.push_back("log:" + r.log().text());
    }
    q.PopThrough(p->seq);
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

TEST(ReportQueue, PopThroughLeavesAFrontThatIsNoLongerTheOneSent) {
  ReportQueue q({100}, nullptr);
  q.Push(Step("job-000001", 1));
  const uint64_t sent = q.front()->seq;
  q.DropJob("job-000001");  // e.g. cancelled while the report was on its way
  q.Push(Step("job-000002", 1));
  q.PopThrough(sent);
  ASSERT_NE(q.front(), nullptr);
  EXPECT_EQ(q.front()->request.job_id(), "job-000002");
}

ReportProgressRequest Sealed(const std::string& job_id, int64_t step) {
  ReportProgressRequest r;
  r.set_job_id(job_id);
  r.mutable_checkpoint()->set_step(step);
  return r;
}

ReportProgressRequest Event(const std::string& job_id, const std::string& text) {
  ReportProgressRequest r;
  r.set_job_id(job_id);
  r.set_event(text);
  return r;
}

TEST(ReportQueue, AFullQueueKeepsEveryOtherStepTheNewestAndEvaluationsAndWarnsInTheJobsLog) {
  std::vector<std::string> logged;
  ReportQueue q({10}, [&](const std::string& line) { logged.push_back(line); });
  for (int step = 1; step <= 10; ++step) {
    ReportProgressRequest r = Step("job-000001", step);
    if (step == 3) r.mutable_step()->set_val_loss(2.5);
    q.Push(r);
  }
  q.Push(Step("job-000001", 11));  // thins 1, 5, 7 and 9 (3 has a validation loss)
  const std::string warning =
      "report buffer full (10): the coordinator has not taken reports for a while; keeping "
      "every 2nd step waiting (4 reports dropped so far)";
  EXPECT_THAT(logged, ElementsAre("warning: " + warning));
  EXPECT_EQ(q.dropped(), 4);
  q.Push(Step("job-000001", 12));  // replaces 11, not a multiple of 2
  q.Push(Step("job-000001", 13));  // kept as the newest, until the next
  EXPECT_EQ(q.dropped(), 5);
  EXPECT_THAT(Contents(q),
              ElementsAre("s2", "s3", "s4", "s6", "s8", "s10", "log:" + warning, "s12", "s13"));
  // Drained: every step is kept again.
  q.Push(Step("job-000001", 14));
  q.Push(Step("job-000001", 15));
  EXPECT_THAT(Contents(q), ElementsAre("s14", "s15"));
}

// A long outage: the queue keeps the whole span of steps at an even resolution, the newest step,
// and every seal.
TEST(ReportQueue, ALongOutageKeepsTheWholeCurveThinnedAndEverySeal) {
  ReportQueue q({100}, nullptr);
  for (int step = 1; step <= 10000; ++step) {
    q.Push(Step("job-000001", step));
    if (step % 1000 == 0) q.Push(Sealed("job-000001", step));
  }
  EXPECT_LE(q.size(), 101);
  std::vector<int64_t> steps;
  std::vector<int64_t> seals;
  while (const ReportQueue::Pending* p = q.front()) {
    if (p->request.has_step()) steps.push_back(p->request.step().step());
    if (p->request.has_checkpoint()) seals.push_back(p->request.checkpoint().step());
    q.PopThrough(p->seq);
  }
  EXPECT_THAT(seals, ElementsAre(1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000));
  ASSERT_GE(steps.size(), 40u);
  EXPECT_EQ(steps.back(), 10000);
  // Evenly spread from the start to the end: no gap wider than the final stride.
  const int64_t stride = steps[1] - steps[0];
  EXPECT_LE(steps.front(), stride);
  for (size_t i = 1; i + 1 < steps.size(); ++i) EXPECT_EQ(steps[i] - steps[i - 1], stride) << i;
  EXPECT_LE(steps.back() - steps[steps.size() - 2], stride);
}

TEST(ReportQueue, WithoutStepsToThinTheOldestLineGoesNotASeal) {
  std::vector<std::string> logged;
  ReportQueue q({3}, [&](const std::string& line) { logged.push_back(line); });
  q.Push(Sealed("job-000001", 10));
  q.Push(Event("job-000001", "e1"));
  q.Push(Event("job-000001", "e2"));
  q.Push(Event("job-000001", "e3"));  // drops e1, then the warning drops e2
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_EQ(logged[0],
            "warning: report buffer full (3): dropping the oldest line; 1 reports dropped so far");
  EXPECT_EQ(q.dropped(), 2);
  EXPECT_THAT(Contents(q),
              ElementsAre("sealed10", "event:e3",
                          "log:report buffer full (3): dropping the oldest line; 1 reports "
                          "dropped so far"));
}

TEST(ReportQueue, NextSendsARunOfOneJobsIncreasingStepsAsOneReport) {
  ReportQueue q({100}, nullptr);
  for (int step = 1; step <= 5; ++step) q.Push(Step("job-000001", step));
  q.Push(Event("job-000001", "e"));
  q.Push(Step("job-000001", 6));
  q.Push(Step("job-000001", 3));  // a new run redoing steps: not in the same StepRun
  q.Push(Step("job-000002", 1));
  auto steps_of = [](const ReportQueue::Batch& b) {
    std::vector<int64_t> steps;
    if (b.request.has_step()) steps.push_back(b.request.step().step());
    for (const StepMetrics& m : b.request.steps().steps()) steps.push_back(m.step());
    return steps;
  };
  std::vector<std::vector<int64_t>> sent;
  while (std::optional<ReportQueue::Batch> b = q.Next(3)) {
    sent.push_back(steps_of(*b));
    EXPECT_EQ(b->reports, b->request.has_steps() ? b->request.steps().steps_size() : 1);
    EXPECT_NE(b->request.time_unix_ms(), 0);  // stamped when queued
    q.PopThrough(b->last_seq);
  }
  using V = std::vector<int64_t>;
  EXPECT_THAT(sent, ElementsAre(V{1, 2, 3}, V{4, 5}, V{}, V{6}, V{3}, V{1}));
  // One at a time when asked (a coordinator that takes no runs).
  q.Push(Step("job-000001", 7));
  q.Push(Step("job-000001", 8));
  std::optional<ReportQueue::Batch> single = q.Next(1);
  ASSERT_TRUE(single.has_value());
  EXPECT_TRUE(single->request.has_step());
  EXPECT_EQ(single->reports, 1);
}

// A new run of the job that resumes right after the old one's last step (its steps go on
// increasing) still starts a report of its own: a StepRun carries one run's attempt.
TEST(ReportQueue, ARunOfStepsNeverSpansTwoRunsOfTheJob) {
  ReportQueue q({100}, nullptr);
  auto step = [](int64_t n, int attempt) {
    ReportProgressRequest r = Step("job-000001", n);
    r.set_attempt(attempt);
    return r;
  };
  q.Push(step(1, 0));
  q.Push(step(2, 0));
  q.Push(step(3, 1));
  q.Push(step(4, 1));
  std::vector<std::pair<int, int>> sent;  // (attempt, steps)
  while (std::optional<ReportQueue::Batch> b = q.Next(10)) {
    sent.push_back({b->request.attempt(), b->reports});
    q.PopThrough(b->last_seq);
  }
  EXPECT_THAT(sent, ElementsAre(std::make_pair(0, 2), std::make_pair(1, 2)));
}

TEST(ReportQueue, PopThroughLeavesWhatWasQueuedAfterTheBatch) {
  ReportQueue q({100}, nullptr);
  q.Push(Step("job-000001", 1));
  q.Push(Step("job-000001", 2));
  std::optional<ReportQueue::Batch> b = q.Next(10);
  ASSERT_TRUE(b.has_value());
  q.Push(Step("job-000001", 3));  // queued while the batch was on its way
  q.PopThrough(b->last_seq);
  EXPECT_THAT(Contents(q), ElementsAre("s3"));
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
    q.PopThrough(p->seq);
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
