#include "plan/job_sample.h"

#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::plan {
namespace {

using ::testing::HasSubstr;

SampleParameters Asked() {
  SampleParameters p;
  p.set_prompt("To be");
  p.set_tokens(64);
  p.set_temperature(1);
  return p;
}

TEST(CheckSampleParameters, EachBoundNamesItsParameter) {
  EXPECT_TRUE(CheckSampleParameters(Asked()).ok());
  SampleParameters p = Asked();
  p.set_tokens(0);
  EXPECT_THAT(CheckSampleParameters(p).message(), HasSubstr("tokens=0: "));
  p.set_tokens(kMaxSampleTokens + 1);
  EXPECT_THAT(CheckSampleParameters(p).message(), HasSubstr("tokens=1025: "));
  p = Asked();
  p.set_top_k(-1);
  EXPECT_THAT(CheckSampleParameters(p).message(), HasSubstr("top_k=-1: "));
  for (double t : {-0.5, 101.0, std::numeric_limits<double>::quiet_NaN(),
                   std::numeric_limits<double>::infinity()}) {
    p = Asked();
    p.set_temperature(t);
    EXPECT_EQ(CheckSampleParameters(p).code(), absl::StatusCode::kInvalidArgument) << t;
    EXPECT_THAT(CheckSampleParameters(p).message(), HasSubstr("temperature=")) << t;
  }
  p = Asked();
  p.set_prompt(std::string(kMaxSamplePromptBytes + 1, 'x'));
  EXPECT_THAT(CheckSampleParameters(p).message(), HasSubstr("longer than 4096 bytes"));
  p.set_prompt(std::string(kMaxSamplePromptBytes, 'x'));
  EXPECT_TRUE(CheckSampleParameters(p).ok());
}

TEST(SampleSourceOf, TheNewestCheckpointElseTheFinalWeights) {
  Job job;
  job.set_id("job-000003");
  EXPECT_EQ(SampleSourceOf(job).status().code(), absl::StatusCode::kFailedPrecondition);
  job.set_output("/out/job-000003.safetensors");
  job.mutable_spec()->mutable_model()->set_n_head(4);
  absl::StatusOr<SampleSource> source = SampleSourceOf(job);
  ASSERT_TRUE(source.ok());
  EXPECT_EQ(source->path, "/out/job-000003.safetensors");
  EXPECT_EQ(source->n_head, 4);
  job.mutable_checkpoint()->set_dir("/ck/job-000003");
  job.mutable_checkpoint()->set_last_sealed_step(40);
  source = SampleSourceOf(job);
  ASSERT_TRUE(source.ok());
  EXPECT_EQ(source->path, "/ck/job-000003");
  EXPECT_EQ(source->n_head, 0);
  EXPECT_EQ(source->what, "checkpoint /ck/job-000003 (step 40)");
}

void AddWorker(google::protobuf::RepeatedPtrField<WorkerInfo>& workers, const std::string& id,
               const std::string& host, WorkerState state) {
  WorkerInfo* w = workers.Add();
  w->set_worker_id(id);
  w->set_host_label(host);
  w->set_state(state);
}

// An idle worker of the files' host before a busy one, rank 0's before the others, never a
// worker of another host or a lost one.
TEST(SamplerOf, AnIdleWorkerOfTheHostRankZerosFirst) {
  Job job;
  job.mutable_placement()->add_ranks()->set_worker_id("w3");
  job.mutable_checkpoint()->set_host("host-a");
  google::protobuf::RepeatedPtrField<WorkerInfo> workers;
  AddWorker(workers, "w1", "host-b", IDLE);
  AddWorker(workers, "w2", "host-a", BUSY);
  EXPECT_EQ(SamplerOf(job, workers), "w2");
  AddWorker(workers, "w3", "host-a", BUSY);
  EXPECT_EQ(SamplerOf(job, workers), "w3");  // busy both: rank 0's
  AddWorker(workers, "w5", "host-a", DRAINED);
  AddWorker(workers, "w4", "host-a", IDLE);
  EXPECT_EQ(SamplerOf(job, workers), "w4");  // idle: the lower id
  workers.Mutable(2)->set_state(IDLE);
  EXPECT_EQ(SamplerOf(job, workers), "w3");  // idle and rank 0's
  for (WorkerInfo& w : workers) {
    if (w.host_label() == "host-a") w.set_state(LOST);
  }
  EXPECT_EQ(SamplerOf(job, workers), "");
  // No host recorded (no checkpoint): rank 0's worker's.
  job.clear_checkpoint();
  workers.Mutable(2)->set_state(BUSY);
  EXPECT_EQ(SamplerOf(job, workers), "w3");
}

}  // namespace
}  // namespace dtrain::plan
