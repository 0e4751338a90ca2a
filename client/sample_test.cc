#include "client/sample.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::client {
namespace {

using ::testing::HasSubstr;

// A script in dtrain-sample's place ($DTRAIN_SAMPLE) whose body is `body`.
std::string Sampler(const std::string& name, const std::string& body) {
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  chmod(path.c_str(), 0755);
  setenv(kSampleBinaryEnv, path.c_str(), 1);
  return path;
}

Invocation Asked() {
  Invocation inv;
  inv.prompt = "The ";
  inv.sample_tokens = 12;
  inv.temperature = "0";
  return inv;
}

TEST(CaptureSample, ReturnsTheJsonLineAndPassesTheFlags) {
  // Prints its own arguments back as the "text".
  Sampler("echo", R"(printf '{"text": "%s"}\n' "$*")");
  absl::StatusOr<std::string> line = CaptureSample("/ck/job-000003", Asked(), absl::Seconds(10));
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_THAT(*line, HasSubstr("/ck/job-000003 --prompt=The  --tokens=12 --temperature=0"));
  EXPECT_THAT(*line, HasSubstr("--json"));  // whatever the invocation said
}

TEST(CaptureSample, ARefusalIsInvalidArgumentInTheSamplersWords) {
  Sampler("refuses",
          "echo 'loading' >&2; echo 'dtrain-sample: error: the prompt is 40 tokens' >&2;"
          " exit 2");
  absl::StatusOr<std::string> line = CaptureSample("/ck", Asked(), absl::Seconds(10));
  EXPECT_EQ(line.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(line.status().message(), HasSubstr("the prompt is 40 tokens"));
  Sampler("fails", "echo 'out of memory' >&2; exit 1");
  line = CaptureSample("/ck", Asked(), absl::Seconds(10));
  EXPECT_EQ(line.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(line.status().message(), HasSubstr("out of memory (exit 1)"));
}

TEST(CaptureSample, ASamplerPastItsDeadlineIsKilled) {
  const std::string pid_file = absl::StrCat(std::getenv("TEST_TMPDIR"), "/hung.pid");
  Sampler("hangs", absl::StrCat("echo $$ > ", pid_file, "; exec sleep 600"));
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> line = CaptureSample("/ck", Asked(), absl::Milliseconds(500));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_EQ(line.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(line.status().message(), HasSubstr("did not finish in 500ms"));
  int pid = 0;
  std::ifstream(pid_file) >> pid;
  ASSERT_GT(pid, 0);
  EXPECT_NE(kill(pid, 0), 0) << "the sampler " << pid << " still runs";
}

TEST(CaptureSample, AMissingSamplerSaysWhereItWasLookedFor) {
  setenv(kSampleBinaryEnv, "/nonexistent/dtrain-sample", 1);
  absl::StatusOr<std::string> line = CaptureSample("/ck", Asked(), absl::Seconds(10));
  EXPECT_EQ(line.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(line.status().message(), HasSubstr("$DTRAIN_SAMPLE"));
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

}  // namespace
}  // namespace dtrain::client
