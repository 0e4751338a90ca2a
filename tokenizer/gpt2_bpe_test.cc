// Byte-pair encoding on small hand-made vocabularies, where each merge can be followed by hand;
// //tokenizer:gpt2_node_test checks GPT-2's own tables against the reference encoder.
#include "tokenizer/gpt2_bpe.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/model/token_dataset.h"

namespace dtrain {
namespace tokenizer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// encoder.json with the 256 single bytes, id = byte (GPT-2 orders them otherwise; nothing here
// depends on it), then `extra` tokens (JSON string bodies) with ids 256.. in order; no
// <|endoftext|>.
std::string EncoderJson(const std::vector<std::string>& extra) {
  std::string json = "{";
  auto printable = [](int b) -> std::string {
    // GPT-2's byte alphabet: printable bytes as themselves, the others from U+0100 in order.
    static int next_of[256] = {};
    static bool init = false;
    if (!init) {
      int next = 0x100;
      for (int c = 0; c < 256; ++c) {
        const bool p = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
        next_of[c] = p ? c : next++;
      }
      init = true;
    }
    char buf[16];
    std::snprintf(buf, sizeof(buf), "\\u%04x", next_of[b]);
    return buf;
  };
  for (int b = 0; b < 256; ++b) json += "\"" + printable(b) + "\": " + std::to_string(b) + ",";
  for (size_t k = 0; k < extra.size(); ++k) {
    json += "\"" + extra[k] + "\": " + std::to_string(256 + k) + ",";
  }
  json.back() = '}';
  return json;
}

TEST(Gpt2Bpe, LowestRankMergesFirstEveryOccurrenceLeftToRight) {
  // Merges: "a b" (rank 0), "ab c" (rank 1), "b c" (rank 2). "abcbc": ab merges first, then
  // abc; "bc" (rank 2) merges the remaining b c.
  absl::StatusOr<Gpt2Bpe> bpe =
      Gpt2Bpe::FromContents(EncoderJson({"ab", "abc", "bc"}), "#version: 0.2\na b\nab c\nb c\n");
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  EXPECT_EQ(bpe->vocab_size(), 259);
  EXPECT_THAT(*bpe->Encode("abcbc"), ElementsAre(257, 258));
  EXPECT_THAT(*bpe->Encode("ababx"), ElementsAre(256, 256, 'x'));
  EXPECT_EQ(*bpe->Decode({257, 258, 'x'}), "abcbcx");
}

TEST(Gpt2Bpe, EachPieceIsEncodedAlone) {
  // " a" is a piece of its own (space then letters), so "b a" never merges across the space.
  absl::StatusOr<Gpt2Bpe> bpe = Gpt2Bpe::FromContents(EncoderJson({"\\u0120a", "b\\u0120"}),
                                                      "#version: 0.2\nb \u0120\n\u0120 a\n");
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  EXPECT_THAT(*bpe->Encode("b a"), ElementsAre('b', 256));
}

TEST(Gpt2Bpe, TheLineAfterTheLastNewlineIsIgnoredAsByTheReference) {
  absl::StatusOr<Gpt2Bpe> bpe = Gpt2Bpe::FromContents(EncoderJson({"ab"}), "#version: 0.2\na b");
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  EXPECT_THAT(*bpe->Encode("ab"), ElementsAre('a', 'b'));
}

TEST(Gpt2Bpe, MalformedTablesAreRefusedNamingTheLine) {
  absl::StatusOr<Gpt2Bpe> bpe =
      Gpt2Bpe::FromContents(EncoderJson({"ab"}), "#version: 0.2\na b\nx y\n");
  ASSERT_EQ(bpe.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bpe.status().message(), HasSubstr("vocab.bpe line 3"));
  bpe = Gpt2Bpe::FromContents("{\"a\": 0}", "#version: 0.2\n");
  ASSERT_EQ(bpe.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bpe.status().message(), HasSubstr("no token for byte 0x00"));
  EXPECT_EQ(Gpt2Bpe::Load("/nonexistent").status().code(), absl::StatusCode::kNotFound);
}

TEST(Gpt2Bpe, DecodeRefusesIdsOutsideTheVocabulary) {
  absl::StatusOr<Gpt2Bpe> bpe = Gpt2Bpe::FromContents(EncoderJson({}), "#version: 0.2\n");
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  absl::StatusOr<std::string> text = bpe->Decode({104, 256});
  ASSERT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(text.status().message(), HasSubstr("token 256 at position 1"));
}

TEST(TokenFileContents, IsReadBackByTokenDataset) {
  const std::vector<int32_t> ids = {50256, 0, 15496, 995, 65535};
  absl::StatusOr<std::string> file = TokenFileContents(ids);
  ASSERT_TRUE(file.ok()) << file.status();
  const std::string path = std::string(getenv("TEST_TMPDIR")) + "/tokens.bin";
  std::ofstream(path, std::ios::binary) << *file;
  absl::StatusOr<model::TokenDataset> data = model::TokenDataset::Open(path, 65536);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_tokens(), 5);
  std::vector<int32_t> inputs(4), targets(4);
  ASSERT_TRUE(data->GetBatch(0, 1, 4, absl::MakeSpan(inputs), absl::MakeSpan(targets)).ok());
  EXPECT_THAT(inputs, ElementsAre(50256, 0, 15496, 995));
  EXPECT_THAT(targets, ElementsAre(0, 15496, 995, 65535));
  EXPECT_EQ(TokenFileContents({65536}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tokenizer
}  // namespace dtrain
