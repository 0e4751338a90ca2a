#include "coordinator/dir_removals.h"

#include <thread>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

using ::testing::IsEmpty;
using ::testing::SizeIs;

PendingDirRemoval Removal(const std::string& job, const std::string& worker,
                          const std::string& host) {
  PendingDirRemoval r;
  r.job_id = job;
  r.uid = "uid-" + job;
  r.dir = "/ckpt/" + job;
  r.host = host;
  r.worker_id = worker;
  return r;
}

JobDirRemoved Done(const std::string& job, DirRemovalState state) {
  JobDirRemoved d;
  d.set_job_id(job);
  d.set_dir("/ckpt/" + job);
  d.set_state(state);
  return d;
}

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

TEST(DirRemovals, TheNamedWorkerFirstOthersOnItsHostOnlyWhileItIsNotLive) {
  DirRemovals removals(absl::Seconds(10));
  EXPECT_TRUE(removals.empty());
  removals.Add(Removal("job-000001", "w1", "a"));
  EXPECT_FALSE(removals.empty());
  bool w1_live = true;
  auto live = [&](const std::string& id) { return id != "w1" || w1_live; };
  auto on_host = [](const std::string& host) { return host == "a" ? "w2" : ""; };
  removals.Reassign(kT0, live, on_host);  // w1 is live: it keeps it
  EXPECT_THAT(removals.ForWorker("w2", kT0), IsEmpty());
  EXPECT_EQ(removals.AskedOf("job-000001"), "w1");
  w1_live = false;
  removals.Reassign(kT0 + absl::Seconds(5), live, on_host);  // not before resend_after
  EXPECT_EQ(removals.AskedOf("job-000001"), "w1");
  removals.Reassign(kT0 + absl::Seconds(10), live, on_host);
  EXPECT_EQ(removals.AskedOf("job-000001"), "w2");
  EXPECT_THAT(removals.ForWorker("w1", kT0 + absl::Seconds(10)), IsEmpty());
  ASSERT_THAT(removals.ForWorker("w2", kT0 + absl::Seconds(10)), SizeIs(1));
  // Not again before resend_after; then again.
  EXPECT_THAT(removals.ForWorker("w2", kT0 + absl::Seconds(19)), IsEmpty());
  std::vector<JobDirRemoval> again = removals.ForWorker("w2", kT0 + absl::Seconds(20));
  ASSERT_THAT(again, SizeIs(1));
  EXPECT_EQ(again[0].job_uid(), "uid-job-000001");
  EXPECT_EQ(again[0].dir(), "/ckpt/job-000001");
  // Answered: nobody gets it any more.
  removals.Answer(Done("job-000001", DIR_REMOVED));
  EXPECT_THAT(removals.ForWorker("w2", kT0 + absl::Minutes(5)), IsEmpty());
  EXPECT_TRUE(removals.empty());
}

TEST(DirRemovals, AnAnswerEndsTheRemovalOnceAndCallsItsWaiters) {
  DirRemovals removals(absl::Seconds(10));
  removals.Add(Removal("job-000001", "w1", "a"));
  // An answer about another directory (a stale one) ends nothing.
  JobDirRemoved other = Done("job-000001", DIR_REMOVED);
  other.set_dir("/elsewhere/job-000001");
  EXPECT_FALSE(removals.Answer(other).has_value());
  // A caller whose time is up hears nothing; one still waiting hears the answer.
  std::optional<JobDirRemoved> late = Done("x", DIR_REMOVED), waiting;
  bool late_called = false, waiting_called = false;
  removals.OnAnswer("job-000001", absl::Now() + absl::Seconds(1),
                    [&](std::optional<JobDirRemoved> a) { late = a, late_called = true; });
  removals.OnAnswer("job-000001", absl::InfiniteFuture(),
                    [&](std::optional<JobDirRemoved> a) { waiting = a, waiting_called = true; });
  removals.ExpireWaiters(absl::Now() + absl::Seconds(2));
  EXPECT_TRUE(late_called);
  EXPECT_FALSE(late.has_value());
  EXPECT_FALSE(waiting_called);
  removals.Answer(Done("job-000001", DIR_ABSENT));
  ASSERT_TRUE(waiting_called);
  ASSERT_TRUE(waiting.has_value());
  EXPECT_EQ(waiting->state(), DIR_ABSENT);
  EXPECT_TRUE(removals.empty());
  // Asked after the answer came: at once.
  std::optional<JobDirRemoved> after;
  removals.OnAnswer("job-000001", absl::InfiniteFuture(),
                    [&](std::optional<JobDirRemoved> a) { after = a; });
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->state(), DIR_ABSENT);
  EXPECT_FALSE(removals.Answer(Done("job-000001", DIR_ABSENT)).has_value());  // sent again
}

TEST(DirRemovals, EachAnswerAndPendingRemovalIsOneLine) {
  JobDirRemoved d = Done("job-000001", DIR_REMOVED);
  d.set_host("a");
  d.set_worker_id("w1");
  d.set_bytes(1'572'864);
  EXPECT_EQ(plan::DescribeDirRemoval(d), "removed /ckpt/job-000001 on a (1.5 MiB, worker w1)");
  d.set_state(DIR_ABSENT);
  EXPECT_EQ(plan::DescribeDirRemoval(d),
            "/ckpt/job-000001 was already gone on a (worker w1 found nothing there)");
  d.set_state(DIR_REMOVAL_FAILED);
  d.set_error("it has no job.json claim");
  EXPECT_EQ(plan::DescribeDirRemoval(d),
            "worker w1 did not remove /ckpt/job-000001 on a: it has no job.json claim");
  d.set_state(DIR_REMOVAL_PENDING);
  EXPECT_EQ(plan::DescribeDirRemoval(d),
            "/ckpt/job-000001 on a is to be removed by worker w1 at its next heartbeat; the "
            "coordinator keeps asking (also after a restart) and logs the outcome");
}

}  // namespace
}  // namespace dtrain::coordinator
