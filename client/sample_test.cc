#include "client/sample.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
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
  inv.prompt = "To be";
  inv.sample_tokens = 5;
  inv.temperature = "0.5";
  inv.top_k = 3;
  inv.seed = 9;
  inv.device = "cpu";
  return inv;
}

// A CHECKPOINT path: dtrain-sample runs with the flags, and its exit code is the command's.
TEST(RunSampler, PassesTheFlagsAndItsExitCode) {
  const std::string args = absl::StrCat(std::getenv("TEST_TMPDIR"), "/args");
  Sampler("exit3.sh", absl::StrCat("echo \"$@\" > ", args, "; exit 3"));
  std::ostringstream err;
  EXPECT_EQ(RunSampler("/ck/job-000003", Asked(), err), 3);
  std::ifstream in(args);
  std::string line;
  std::getline(in, line);
  EXPECT_THAT(line, HasSubstr("/ck/job-000003 --prompt=To be --tokens=5 --temperature=0.5 "
                              "--top_k=3 --seed=9 --device=cpu"));
  setenv(kSampleBinaryEnv, "/nonexistent/dtrain-sample", 1);
  EXPECT_EQ(RunSampler("/ck", Asked(), err), 2);
  EXPECT_THAT(err.str(), HasSubstr("cannot run /nonexistent/dtrain-sample"));
}

// `dtrain sample JOB`'s flags as SampleJob takes them, refused with the bounds' own words.
TEST(SampleParametersOf, TheFlagsAsSampleJobTakesThem) {
  Invocation inv = Asked();
  absl::StatusOr<SampleParameters> p = SampleParametersOf(inv);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->prompt(), "To be");
  EXPECT_EQ(p->tokens(), 5);
  EXPECT_EQ(p->temperature(), 0.5);
  EXPECT_EQ(p->top_k(), 3);
  EXPECT_EQ(p->seed(), 9u);
  inv.temperature = "warm";
  EXPECT_THAT(SampleParametersOf(inv).status().message(), HasSubstr("--temperature=warm"));
  inv.temperature = "101";
  EXPECT_THAT(SampleParametersOf(inv).status().message(), HasSubstr("temperature=101: "));
  inv = Asked();
  inv.sample_tokens = 1025;
  EXPECT_EQ(SampleParametersOf(inv).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(SampleParametersOf(inv).status().message(), HasSubstr("tokens=1025: "));
}

}  // namespace
}  // namespace dtrain::client
