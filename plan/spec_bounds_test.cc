#include "plan/spec_bounds.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "plan/spec_json.h"

namespace dtrain::plan {
namespace {

using ::testing::HasSubstr;

constexpr absl::string_view kPrefix = R"({"name": "deep", "parallel": {"stage_layers": )";

// kPrefix then `depth` '[' and as many ']', then the closing braces.
std::string Nested(int depth) {
  return absl::StrCat(kPrefix, std::string(depth, '['), std::string(depth, ']'), "}}");
}

TEST(SpecJsonBounds, DeepNestingIsRefusedAtTheCapNamingTheByte) {
  // 200 KB: 100,000 levels, which protobuf's reader takes minutes over.
  const absl::Status status = CheckSpecJsonBounds(Nested(100'000));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  // Depth 1 is the spec's '{', 2 "parallel"'s: the 63rd '[' is the 65th level.
  EXPECT_EQ(status.message(), absl::StrCat("invalid job spec: nesting depth exceeds 64 at byte ",
                                           kPrefix.size() + 62));
}

TEST(SpecJsonBounds, ReadJobSpecJsonChecksTheBoundsBeforeParsing) {
  JobSpec spec;
  std::vector<std::string> problems;
  const absl::Status status = ReadJobSpecJson(Nested(100'000), &spec, &problems);
  EXPECT_THAT(status.message(), HasSubstr("nesting depth exceeds 64"));
}

TEST(SpecJsonBounds, DepthAtTheCapPasses) {
  EXPECT_TRUE(CheckSpecJsonBounds(Nested(62)).ok());
  EXPECT_FALSE(CheckSpecJsonBounds(Nested(63)).ok());
}

TEST(SpecJsonBounds, BracketsInsideStringsAreNotNesting) {
  const std::string name = std::string(30, '[') + "\\\"" + std::string(30, '{');
  EXPECT_TRUE(CheckSpecJsonBounds(absl::StrCat(R"({"name": ")", name, R"("})")).ok());
}

TEST(SpecJsonBounds, LongStringsAreRefusedNamingTheFieldAndTheCap) {
  EXPECT_EQ(
      CheckSpecJsonBounds(absl::StrCat(R"({"name": ")", std::string(300, 'x'), R"("})")).message(),
      "invalid job spec: field \"name\" is 300 bytes, above the cap of 256 (at byte 9)");
  EXPECT_TRUE(
      CheckSpecJsonBounds(absl::StrCat(R"({"dataset": ")", std::string(4096, 'x'), R"("})")).ok());
  EXPECT_THAT(CheckSpecJsonBounds(
                  absl::StrCat(R"({"checkpoint": {"dir": ")", std::string(4097, 'x'), R"("}})"))
                  .message(),
              HasSubstr("field \"dir\" is 4097 bytes, above the cap of 4096"));
  EXPECT_THAT(
      CheckSpecJsonBounds(absl::StrCat(R"({")", std::string(1 << 20, 'k'), R"(": 1})")).message(),
      HasSubstr("a field name is 1048576 bytes, above the cap of 64"));
  EXPECT_THAT(
      CheckSpecJsonBounds(absl::StrCat(R"({"steps": )", std::string(100, '9'), "}")).message(),
      HasSubstr("a value is 100 bytes, above the cap of 64"));
}

TEST(SpecJsonBounds, LongArraysAreRefused) {
  std::string items = "1";
  for (int i = 1; i <= kMaxSpecArrayItems; ++i) items += ",1";
  EXPECT_THAT(CheckSpecJsonBounds(absl::StrCat(kPrefix, "[", items, "]}}")).message(),
              HasSubstr("an array has more than 4096 elements"));
}

TEST(SpecJsonBounds, MalformedJsonIsLeftToTheParser) {
  EXPECT_TRUE(CheckSpecJsonBounds(R"({"name": "unclosed)").ok());
  EXPECT_TRUE(CheckSpecJsonBounds("]]]}}}").ok());
  EXPECT_TRUE(CheckSpecJsonBounds("").ok());
}

TEST(SpecFieldLengths, AMessageHasTheSameCapsWithTheFieldsPath) {
  JobSpec spec;
  spec.set_name("fine");
  EXPECT_TRUE(CheckSpecFieldLengths(spec).ok());
  spec.mutable_checkpoint()->set_dir(std::string(5000, 'd'));
  EXPECT_EQ(CheckSpecFieldLengths(spec).message(),
            "invalid job spec: field \"checkpoint.dir\" is 5000 bytes, above the cap of 4096");
  spec.clear_checkpoint();
  spec.mutable_parallel()->set_schedule(std::string(65, 's'));
  EXPECT_THAT(CheckSpecFieldLengths(spec).message(),
              HasSubstr("\"parallel.schedule\" is 65 bytes, above the cap of 64"));
}

}  // namespace
}  // namespace dtrain::plan
