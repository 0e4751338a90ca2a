#include "coordinator/request_bounds.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"

namespace dtrain::coordinator {
namespace {

TEST(RequestBounds, AnOversizedIdIsRefusedNamingTheFieldAndTheCap) {
  GetJobRequest get;
  get.set_job_id("job-000042");
  EXPECT_TRUE(CheckRequestBounds(get).ok());
  get.set_job_id(std::string(1 << 20, 'j'));
  const absl::Status status = CheckRequestBounds(get);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "field job_id is 1048576 bytes, above the cap of 64");
}

TEST(RequestBounds, EachRepeatedEntryAndTheirCountAreCapped) {
  RegisterWorkerRequest request;
  request.set_worker_id("w1");
  request.add_allowed_roots("/data");
  EXPECT_TRUE(CheckRequestBounds(request).ok());
  request.add_allowed_roots(std::string(4097, 'r'));
  EXPECT_EQ(CheckRequestBounds(request).message(),
            "field allowed_roots is 4097 bytes, above the cap of 4096");
  request.clear_allowed_roots();
  for (int i = 0; i < 257; ++i) request.add_allowed_roots("/r");
  EXPECT_EQ(CheckRequestBounds(request).message(),
            "field allowed_roots has 257 entries, above the cap of 256");
}

TEST(RequestBounds, TheSpecTextIsLeftToItsOwnCap) {
  SubmitJobRequest submit;
  submit.set_spec_json(std::string(100'000, ' '));
  EXPECT_TRUE(CheckRequestBounds(submit).ok());
  CancelJobRequest cancel;
  cancel.set_job_id("job-000001");
  cancel.set_reason(std::string(1025, 'r'));
  EXPECT_EQ(CheckRequestBounds(cancel).message(),
            "field reason is 1025 bytes, above the cap of 1024");
}

}  // namespace
}  // namespace dtrain::coordinator
