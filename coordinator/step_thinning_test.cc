// GetJobSteps' reading and thinning (step_thinning.h) over a real store.
#include "coordinator/step_thinning.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "common/grpc_limits.h"
#include "coordinator/job_store.h"
#include "coordinator/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

using ::testing::HasSubstr;

constexpr char kJob[] = "job-000001";

// A store holding one job with steps 1..n: loss 3 + sin(step/50), 1000 tokens/s, an evaluation
// every `eval_every` steps; then `tweak` on each step before it is recorded.
std::unique_ptr<JobStore> StoreWithSteps(const std::string& name, int64_t n, int64_t eval_every,
                                         void (*tweak)(StepMetrics*) = nullptr) {
  auto store = JobStore::Open(TempDb(name));
  EXPECT_TRUE(store.ok()) << store.status();
  JobSpec spec;
  spec.set_name("long");
  spec.set_dataset("/d.bin");
  spec.set_steps(n);
  EXPECT_TRUE((*store)->CreateJob(spec, "queued", 1).ok());
  std::vector<StepMetrics> run;
  for (int64_t step = 1; step <= n; ++step) {
    StepMetrics& m = run.emplace_back();
    m.set_step(step);
    m.set_loss(3 + std::sin(step / 50.0));
    m.set_tokens_per_s(1000);
    m.set_time_unix_ms(step);
    if (eval_every > 0 && step % eval_every == 0) m.set_val_loss(3.5);
    if (tweak != nullptr) tweak(&m);
    if (run.size() == 4096 || step == n) {
      EXPECT_TRUE((*store)->AppendMetrics(kJob, run).ok());
      run.clear();
    }
  }
  return *std::move(store);
}

GetJobStepsRequest Range(int64_t after, int64_t until, int max_steps) {
  GetJobStepsRequest request;
  request.set_job_id(kJob);
  request.set_after_step(after);
  request.set_until_step(until);
  request.set_max_steps(max_steps);
  return request;
}

std::vector<int64_t> StepsOf(const GetJobStepsResponse& r) {
  std::vector<int64_t> steps;
  for (const StepMetrics& m : r.steps()) steps.push_back(m.step());
  return steps;
}

TEST(StepThinning, AFewStepsComeWhole) {
  std::unique_ptr<JobStore> store = StoreWithSteps("thin-few", 500, 0);
  absl::StatusOr<GetJobStepsResponse> all = ReadJobSteps(*store, Range(0, 0, 0));
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->recorded(), 500);
  ASSERT_EQ(all->steps_size(), 500);
  EXPECT_EQ(all->steps(0).step(), 1);
  EXPECT_EQ(all->steps(499).step(), 500);
  EXPECT_DOUBLE_EQ(all->steps(9).loss(), 3 + std::sin(10 / 50.0));
  // A range: (100, 200].
  absl::StatusOr<GetJobStepsResponse> some = ReadJobSteps(*store, Range(100, 200, 0));
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_EQ(some->recorded(), 100);
  ASSERT_EQ(some->steps_size(), 100);
  EXPECT_EQ(some->steps(0).step(), 101);
  EXPECT_EQ(some->steps(99).step(), 200);
}

// A long run thinned to about max_steps keeps its ends, every evaluation, and a one-step spike
// of the loss and a one-step dip of tokens/s, in step order.
TEST(StepThinning, ALongRunKeepsItsEnvelopeSpikesAndEvaluations) {
  std::unique_ptr<JobStore> store = StoreWithSteps("thin-long", 200000, 10000, [](StepMetrics* m) {
    if (m->step() == 123457) m->set_loss(40);
    if (m->step() == 77777) m->set_tokens_per_s(3);
    if (m->step() == 150003) m->set_loss(std::nan(""));
  });
  absl::StatusOr<GetJobStepsResponse> r = ReadJobSteps(*store, Range(0, 0, 2000));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->recorded(), 200000);
  const std::vector<int64_t> steps = StepsOf(*r);
  EXPECT_LE(steps.size(), 2000u + 20 + 2);
  EXPECT_GE(steps.size(), 500u);  // at least two steps a bucket
  EXPECT_TRUE(std::is_sorted(steps.begin(), steps.end()));
  EXPECT_EQ(absl::flat_hash_set<int64_t>(steps.begin(), steps.end()).size(), steps.size());
  EXPECT_EQ(steps.front(), 1);
  EXPECT_EQ(steps.back(), 200000);
  const absl::flat_hash_set<int64_t> kept(steps.begin(), steps.end());
  for (int64_t e = 10000; e <= 200000; e += 10000) EXPECT_TRUE(kept.contains(e)) << e;
  EXPECT_TRUE(kept.contains(123457));
  EXPECT_TRUE(kept.contains(77777));
  EXPECT_FALSE(kept.contains(150003));  // a NaN gives way to the numbers of its bucket
  // Spread over the whole range: no gap wider than two buckets (200000 / 500 each).
  for (size_t i = 1; i < steps.size(); ++i) EXPECT_LE(steps[i] - steps[i - 1], 800) << steps[i];
  // Each kept step is the recorded one, whole.
  for (const StepMetrics& m : r->steps()) {
    if (m.step() == 10000) {
      EXPECT_DOUBLE_EQ(m.val_loss(), 3.5);
    }
    if (m.step() == 123457) {
      EXPECT_DOUBLE_EQ(m.loss(), 40);
    }
  }
}

// The zoom the console asks for: a window of a long run, whole when it is small enough.
TEST(StepThinning, AWindowOfALongRunComesWholeOrThinnedOnItsOwn) {
  std::unique_ptr<JobStore> store = StoreWithSteps("thin-window", 50000, 0);
  absl::StatusOr<GetJobStepsResponse> window = ReadJobSteps(*store, Range(30000, 31500, 2000));
  ASSERT_TRUE(window.ok()) << window.status();
  EXPECT_EQ(window->recorded(), 1500);
  EXPECT_EQ(window->steps_size(), 1500);
  absl::StatusOr<GetJobStepsResponse> wide = ReadJobSteps(*store, Range(10000, 40000, 1000));
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ(wide->recorded(), 30000);
  EXPECT_LE(wide->steps_size(), 1002);
  EXPECT_EQ(wide->steps(0).step(), 10001);
  EXPECT_EQ(wide->steps(wide->steps_size() - 1).step(), 40000);
}

TEST(StepThinning, BadRequestsAreNamed) {
  std::unique_ptr<JobStore> store = StoreWithSteps("thin-bad", 10, 0);
  EXPECT_THAT(ReadJobSteps(*store, Range(0, 0, kMaxThinnedSteps + 1)).status().message(),
              HasSubstr("max_steps 20001 is outside 0 (2000) to 20000"));
  EXPECT_THAT(ReadJobSteps(*store, Range(-1, 0, 0)).status().message(),
              HasSubstr("a step is not negative"));
  GetJobStepsRequest unknown = Range(0, 0, 0);
  unknown.set_job_id("job-999999");
  EXPECT_TRUE(absl::IsNotFound(ReadJobSteps(*store, unknown).status()));
  // No steps yet: none, and nothing recorded.
  absl::StatusOr<GetJobStepsResponse> none = ReadJobSteps(*store, Range(10, 0, 0));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->recorded(), 0);
  EXPECT_EQ(none->steps_size(), 0);
}

}  // namespace
}  // namespace dtrain::coordinator
