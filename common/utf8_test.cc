#include "common/utf8.h"

#include <string>

#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"

namespace dtrain {
namespace {

using namespace std::string_literals;

TEST(Utf8, EmptyIsValid) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_EQ(EscapeInvalidUtf8(""), "");
}

TEST(Utf8, ValidTextIsKeptByteForByte) {
  for (const std::string& s : {"plain ascii"s, "caf\xc3\xa9"s, "\xe2\x82\xac 5"s,
                               "\xf0\x9f\x98\x80"s, "nul \0 inside"s, "\xf4\x8f\xbf\xbf"s}) {
    EXPECT_TRUE(IsValidUtf8(s)) << s;
    EXPECT_EQ(EscapeInvalidUtf8(s), s);
  }
}

TEST(Utf8, InvalidBytesAreSpelledOut) {
  EXPECT_EQ(EscapeInvalidUtf8("caf\xe9.txt"), "caf\\xe9.txt");  // Latin-1
  EXPECT_EQ(EscapeInvalidUtf8("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(EscapeInvalidUtf8("\x80"), "\\x80");                             // a lone continuation
  EXPECT_EQ(EscapeInvalidUtf8("\xc3"), "\\xc3");                             // cut short at the end
  EXPECT_EQ(EscapeInvalidUtf8("\xc3("), "\\xc3(");                           // cut short inside
  EXPECT_EQ(EscapeInvalidUtf8("\xc0\xaf"), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(EscapeInvalidUtf8("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(EscapeInvalidUtf8("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // > U+10FFFF
  EXPECT_EQ(EscapeInvalidUtf8("a\xe9\xc3\xa9"), "a\\xe9\xc3\xa9");           // the valid part kept
}

TEST(Utf8, EscapingGivesValidTextAndIsIdempotent) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string once = EscapeInvalidUtf8(all);
  EXPECT_FALSE(IsValidUtf8(all));
  EXPECT_TRUE(IsValidUtf8(once));
  EXPECT_EQ(EscapeInvalidUtf8(once), once);
}

// The oracle is protobuf itself: a message with invalid UTF-8 in a string field does not parse
// at the far end (what made the coordinator answer an empty INTERNAL).
TEST(Utf8, EveryStringFieldOfAMessageIsFixedSoItParsesAtTheFarEnd) {
  ReportProgressRequest r;
  r.set_job_id("job-000001");
  r.set_worker_id("w1");
  r.mutable_outcome()->set_error("cannot read /data/caf\xe9.txt: manifest \xff\xfe");
  r.mutable_outcome()->add_suspect_workers("w\x80");
  r.mutable_outcome()->set_error_code(5);
  std::string wire;
  ASSERT_TRUE(r.SerializeToString(&wire));  // protobuf only logs on the way out
  ReportProgressRequest parsed;
  EXPECT_FALSE(parsed.ParseFromString(wire));

  EXPECT_EQ(MakeStringsValidUtf8(&r), 2);
  EXPECT_EQ(r.outcome().error(), "cannot read /data/caf\\xe9.txt: manifest \\xff\\xfe");
  EXPECT_EQ(r.outcome().suspect_workers(0), "w\\x80");
  EXPECT_EQ(r.job_id(), "job-000001");
  ASSERT_TRUE(r.SerializeToString(&wire));
  ASSERT_TRUE(parsed.ParseFromString(wire));
  EXPECT_EQ(parsed.outcome().error(), r.outcome().error());
  EXPECT_EQ(parsed.outcome().error_code(), 5);
  EXPECT_EQ(MakeStringsValidUtf8(&r), 0);
}

}  // namespace
}  // namespace dtrain
