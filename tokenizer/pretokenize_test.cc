// The expected pieces are what the gpt-3-encoder package's regular expression gives in node 20
// (String.prototype.matchAll with its pattern), printed once and pasted here.
#include "tokenizer/pretokenize.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tokenizer/unicode_text.h"

namespace dtrain {
namespace tokenizer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Pieces(const std::string& text) {
  absl::StatusOr<std::vector<absl::string_view>> pieces = Pretokenize(text);
  EXPECT_TRUE(pieces.ok()) << pieces.status();
  if (!pieces.ok()) return {};
  return std::vector<std::string>(pieces->begin(), pieces->end());
}

TEST(Pretokenize, EmptyTextHasNoPieces) { EXPECT_THAT(Pieces(""), ElementsAre()); }

TEST(Pretokenize, WordsTakeTheirLeadingSpaceAndContractionsSplitOff) {
  EXPECT_THAT(Pieces("Hello world's  12\n"),
              ElementsAre("Hello", " world", "'s", " ", " 12", "\n"));
  EXPECT_THAT(Pieces("they're 'strong' I'LL"),
              ElementsAre("they", "'re", " '", "strong", "'", " I", "'", "LL"));
}

TEST(Pretokenize, ARunOfSpacesGivesItsLastSpaceToTheNextWord) {
  EXPECT_THAT(Pieces("  leading\t\tx  \n\n"),
              ElementsAre(" ", " leading", "\t", "\t", "x", "  \n\n"));
  EXPECT_THAT(Pieces("x   "), ElementsAre("x", "   "));
  EXPECT_THAT(Pieces("\r\n\r\nend"), ElementsAre("\r\n\r", "\n", "end"));
}

TEST(Pretokenize, UnicodeLettersNumbersAndSpaces) {
  EXPECT_THAT(Pieces("naïve café ½ ٣٤ 日本語!! "),
              ElementsAre("naïve", " café", " ½", " ٣٤", " 日本語", "!!", " "));
  // U+00A0 and U+3000 are \s; U+FEFF is \s in JavaScript; U+0085 is not.
  EXPECT_THAT(Pieces("a\u00a0b\u3000 c \ufeffd\u0085e"),
              ElementsAre("a", "\u00a0", "b", "\u3000", " c", " ", "\ufeff", "d", "\u0085", "e"));
  EXPECT_THAT(Pieces("emoji 👍🏽 ok"), ElementsAre("emoji", " 👍🏽", " ok"));
}

TEST(Pretokenize, InvalidUtf8IsRefusedWithItsOffset) {
  absl::StatusOr<std::vector<absl::string_view>> pieces = Pretokenize("ok \xC3\x28");
  ASSERT_EQ(pieces.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pieces.status().message(), HasSubstr("invalid UTF-8 at byte 4"));
  EXPECT_FALSE(DecodeUtf8("\xC0\x80").ok());          // overlong NUL
  EXPECT_FALSE(DecodeUtf8("\xED\xA0\x80").ok());      // a surrogate
  EXPECT_FALSE(DecodeUtf8("\xF4\x90\x80\x80").ok());  // above U+10FFFF
  EXPECT_FALSE(DecodeUtf8("\xE2\x82").ok());          // truncated
}

TEST(UnicodeText, ReplaceInvalidUtf8KeepsValidCharactersAndReplacesEachBadByte) {
  EXPECT_EQ(ReplaceInvalidUtf8("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_EQ(ReplaceInvalidUtf8("a\xFF\xE2\x82"), "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

// A large text encoded part by part (dtrain data prepare): cut at LastSafeCut, the parts'
// pieces are the whole's, for texts made of the fragments where pieces meet in odd ways.
TEST(Pretokenize, PartsCutAtLastSafeCutHaveThePiecesOfTheWhole) {
  const std::vector<std::string> fragments = {" ",
                                              "\n",
                                              "\n\n",
                                              "word",
                                              "'s",
                                              "'ll",
                                              "12",
                                              "!!",
                                              "x\n",
                                              " \n",
                                              "\t",
                                              "\xC2\xA0" /* NBSP */,
                                              "\xE3\x80\x80" /* U+3000 */,
                                              "caf\xC3\xA9",
                                              "  ",
                                              "\r\n",
                                              "a"};
  std::mt19937 rng(1337);
  for (int round = 0; round < 20; ++round) {
    std::string whole;
    for (int k = 0; k < 3000; ++k) whole += fragments[rng() % fragments.size()];
    absl::StatusOr<std::vector<absl::string_view>> want = Pretokenize(whole);
    ASSERT_TRUE(want.ok()) << want.status();
    std::vector<std::string> got;
    std::string buffer;
    size_t read = 0, cuts = 0;
    while (read < whole.size() || !buffer.empty()) {
      const size_t more = std::min(whole.size() - read, size_t{1} + rng() % 200);
      buffer += whole.substr(read, more);
      read += more;
      const size_t cut = read == whole.size() ? buffer.size() : LastSafeCut(buffer);
      if (cut == 0) continue;
      cuts += cut < buffer.size();
      absl::StatusOr<std::vector<absl::string_view>> part =
          Pretokenize(absl::string_view(buffer).substr(0, cut));
      ASSERT_TRUE(part.ok()) << part.status();
      for (absl::string_view p : *part) got.emplace_back(p);
      buffer.erase(0, cut);
    }
    ASSERT_GT(cuts, 10u);
    ASSERT_EQ(got, std::vector<std::string>(want->begin(), want->end())) << "round " << round;
  }
  EXPECT_EQ(LastSafeCut("no newline"), 0u);
  EXPECT_EQ(LastSafeCut("a \nb"), 0u);  // after a space: not safe
  EXPECT_EQ(LastSafeCut("ab\ncd\nef"), 5u);
}

TEST(UnicodeText, Classes) {
  EXPECT_TRUE(IsLetter(U'ï'));
  EXPECT_TRUE(IsLetter(U'日'));
  EXPECT_FALSE(IsLetter(U'1'));
  EXPECT_TRUE(IsNumber(U'½'));
  EXPECT_TRUE(IsNumber(U'٣'));
  EXPECT_TRUE(IsSpace(U'\v'));
  EXPECT_TRUE(IsSpace(0x2029));
  EXPECT_FALSE(IsSpace(0x85));
  EXPECT_FALSE(IsSpace(0x1C));
}

}  // namespace
}  // namespace tokenizer
}  // namespace dtrain
