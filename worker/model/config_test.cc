#include "worker/model/config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/model/config_proto.h"

namespace dtrain::model {
namespace {

using ::testing::HasSubstr;

TEST(GptConfig, DefaultIsValidAndCountsGpt2Parameters) {
  GptConfig c;
  EXPECT_TRUE(Validate(c).ok());
  // GPT-2 small (V=50257, context 1024, 12 layers, C=768) has 124,439,808 parameters.
  GptConfig gpt2{50257, 1024, 12, 12, 768};
  EXPECT_EQ(gpt2.num_parameters(), 124439808);
}

TEST(GptConfig, ValidationReportsEveryProblemWithFieldNames) {
  GptConfig c{0, 128, -1, 3, 256};
  absl::Status s = Validate(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("vocab_size=0 must be positive"));
  EXPECT_THAT(s.message(), HasSubstr("n_layer=-1 must be positive"));
  EXPECT_THAT(s.message(), HasSubstr("n_head=3 does not divide n_embd=256"));
}

TEST(GptConfigProto, JsonRoundTrip) {
  auto c = GptConfigFromJson(
      R"({"vocab_size": 256, "context": 64, "n_layer": 2, "n_head": 4, "n_embd": 64})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->context, 64);
  EXPECT_EQ(c->n_layer, 2);
  EXPECT_EQ(GptConfigToProto(*c).n_embd(), 64);
}

TEST(GptConfigProto, UnknownFieldIsNamed) {
  auto c = GptConfigFromJson(R"({"vocab_size": 256, "n_layers": 2})");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("n_layers"));
}

TEST(GptConfigProto, MalformedJsonIsAnError) {
  EXPECT_EQ(GptConfigFromJson("{\"vocab_size\": ").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GptConfigProto, InvalidValuesAreReported) {
  auto c = GptConfigFromJson(
      R"({"vocab_size": 256, "context": 64, "n_layer": 2, "n_head": 3, "n_embd": 64})");
  EXPECT_THAT(c.status().message(), HasSubstr("n_head=3 does not divide n_embd=64"));
}

}  // namespace
}  // namespace dtrain::model
