#include "common/status_macros.h"

#include "gtest/gtest.h"

namespace dtrain {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError(absl::StrCat(x, " is odd"));
  return x / 2;
}

absl::Status Quarter(int x, int* out) {
  ASSIGN_OR_RETURN(int half, Half(x));
  ASSIGN_OR_RETURN(*out, Half(half));
  return absl::OkStatus();
}

absl::Status CheckEven(int x) {
  RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

TEST(StatusMacros, AssignOrReturnPassesValuesThrough) {
  int out = 0;
  ASSERT_TRUE(Quarter(12, &out).ok());
  EXPECT_EQ(out, 3);
}

TEST(StatusMacros, AssignOrReturnReturnsTheFirstError) {
  int out = 0;
  absl::Status s = Quarter(6, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "3 is odd");
}

TEST(StatusMacros, ReturnIfErrorAndAnnotateKeepTheCode) {
  absl::Status s = Annotate(CheckEven(5), "while checking");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "while checking: 5 is odd");
  EXPECT_TRUE(Annotate(absl::OkStatus(), "x").ok());
}

}  // namespace
}  // namespace dtrain
