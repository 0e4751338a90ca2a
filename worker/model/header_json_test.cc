#include "worker/model/header_json.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain {
namespace model {
namespace {

using ::testing::HasSubstr;

TEST(HeaderJson, ParsesNestedValuesInDocumentOrder) {
  absl::StatusOr<JsonValue> v = ParseJson(
      R"(  {"b": [1, -2, 3.5e1], "a": {"s": "x\"y\\\n\u00e9\ud83d\ude00"}, "t": true, "n": null}   )");
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->kind(), JsonValue::Kind::kObject);
  EXPECT_EQ(v->keys(), (std::vector<std::string>{"b", "a", "t", "n"}));
  const JsonValue* b = v->Find("b");
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->items().size(), 3u);
  EXPECT_EQ(b->items()[0].AsInt64(), 1);
  EXPECT_EQ(b->items()[1].AsInt64(), -2);
  EXPECT_EQ(b->items()[2].AsInt64(), std::nullopt);  // 3.5e1 is not written as an integer
  EXPECT_EQ(b->items()[2].text(), "3.5e1");
  EXPECT_EQ(v->Find("a")->Find("s")->text(), "x\"y\\\n\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_TRUE(v->Find("t")->boolean());
  EXPECT_EQ(v->Find("n")->kind(), JsonValue::Kind::kNull);
  EXPECT_EQ(v->Find("missing"), nullptr);
}

TEST(HeaderJson, Int64IsExactAtTheLimitsAndRejectsOverflow) {
  absl::StatusOr<JsonValue> v =
      ParseJson("[9223372036854775807, -9223372036854775808, 9223372036854775808]");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->items()[0].AsInt64(), INT64_MAX);
  EXPECT_EQ(v->items()[1].AsInt64(), INT64_MIN);
  EXPECT_EQ(v->items()[2].AsInt64(), std::nullopt);
}

TEST(HeaderJson, RejectsMalformedInputWithPosition) {
  struct Case {
    const char* text;
    const char* problem;
  };
  for (const Case& c : std::vector<Case>{
           {"", "unexpected end of input"},
           {"{\"a\": 1,}", "expected a string key"},
           {"{\"a\" 1}", "expected ':'"},
           {"{\"a\": 1, \"a\": 2}", "duplicate key \"a\""},
           {"[1 2]", "expected ',' or ']'"},
           {"{} x", "unexpected text after the JSON value"},
           {"\"abc", "unterminated string"},
           {"\"a\nb\"", "control character"},
           {"\"\\q\"", "invalid escape"},
           {"\"\\ud800\"", "unpaired high surrogate"},
           {"\"\\udc00\"", "unpaired low surrogate"},
           {"012", "leading zero"},
           {"1.", "expected a digit after '.'"},
           {"-", "expected a digit"},
           {"1e", "exponent"},
           {"tru", "unexpected character 't'"},
       }) {
    absl::StatusOr<JsonValue> v = ParseJson(c.text);
    ASSERT_FALSE(v.ok()) << c.text;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(v.status().message()), HasSubstr(c.problem)) << c.text;
    EXPECT_THAT(std::string(v.status().message()), HasSubstr("at byte ")) << c.text;
  }
}

TEST(HeaderJson, RejectsDeepNesting) {
  absl::StatusOr<JsonValue> v = ParseJson(std::string(100, '[') + std::string(100, ']'));
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("nesting deeper than 64"));
  EXPECT_TRUE(ParseJson(std::string(60, '[') + std::string(60, ']')).ok());
}

TEST(HeaderJson, AppendJsonStringRoundTrips) {
  const std::string raw = std::string("q\"b\\c\x01\n\t\xc3\xa9", 10);
  std::string literal;
  AppendJsonString(raw, &literal);
  EXPECT_EQ(literal, "\"q\\\"b\\\\c\\u0001\\u000a\\u0009\xc3\xa9\"");
  absl::StatusOr<JsonValue> v = ParseJson(literal);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->text(), raw);
}

}  // namespace
}  // namespace model
}  // namespace dtrain
