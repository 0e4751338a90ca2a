#include "client/data_prepare.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tokenizer/gpt2_bpe.h"

namespace dtrain::client {
namespace {

// Runfiles (the test's data): GPT-2's encoder.json and vocab.bpe, and edge_cases.txt (many
// scripts, emoji, Unicode spaces, whitespace and punctuation runs).
const char* const g_tokenizer_dir = "external/gpt2_tokenizer";
const char* const g_edge_cases = "tokenizer/testdata/edge_cases.txt";

using ::testing::HasSubstr;

std::string Temp(const std::string& name) { return absl::StrCat(getenv("TEST_TMPDIR"), "/", name); }

// A corpus encoded in small parts (a 1 KiB part size here, 16 MiB in `dtrain data prepare`)
// gives the file the whole text encoded at once gives, byte for byte; progress is reported.
TEST(PrepareTokenFile, APartByPartEncodingIsTheWholeTextsEncoding) {
  absl::StatusOr<std::string> edge = ReadFileToString(g_edge_cases);
  ASSERT_TRUE(edge.ok()) << edge.status();
  std::string text;
  for (int k = 0; k < 12; ++k) absl::StrAppend(&text, *edge, k % 2 ? " \n" : "\n\n ", k);
  const std::string in = Temp("corpus.txt");
  ASSERT_TRUE(WriteFileAtomically(in, text).ok());
  absl::StatusOr<tokenizer::Gpt2Bpe> bpe = tokenizer::Gpt2Bpe::Load(g_tokenizer_dir);
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  absl::StatusOr<std::vector<int32_t>> whole = bpe->Encode(text);
  ASSERT_TRUE(whole.ok()) << whole.status();
  absl::StatusOr<std::string> want = tokenizer::TokenFileContents(*whole);
  ASSERT_TRUE(want.ok());
  for (const char* name : {"gpt2", "byte"}) {
    const std::string out = Temp(absl::StrCat(name, ".bin"));
    absl::StatusOr<PreparedTokens> prepared =
        PrepareTokenFile(in, out, name, g_tokenizer_dir, nullptr, /*part_bytes=*/1024);
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    EXPECT_EQ(prepared->bytes, static_cast<int64_t>(text.size()));
    absl::StatusOr<std::string> got = ReadFileToString(out);
    ASSERT_TRUE(got.ok());
    if (std::string(name) == "gpt2") {
      EXPECT_EQ(prepared->tokens, static_cast<int64_t>(whole->size()));
      EXPECT_TRUE(*got == *want) << "the part-by-part file differs from the whole text's";
    } else {
      std::vector<int32_t> bytes(text.begin(), text.end());
      for (int32_t& b : bytes) b &= 0xFF;
      EXPECT_TRUE(*got == *tokenizer::TokenFileContents(bytes));
    }
  }
  EXPECT_GT(text.size(), 30u * 1024) << "too small to be cut into many parts";
}

TEST(PrepareTokenFile, BadInputIsNamed) {
  const std::string latin1 = Temp("latin1.txt");
  // "café" in Latin-1 far into the file: the offset is the file's, not the part's.
  ASSERT_TRUE(WriteFileAtomically(latin1, std::string(9000, 'a') + "\ncaf\xE9\n").ok());
  absl::StatusOr<PreparedTokens> bad =
      PrepareTokenFile(latin1, Temp("x.bin"), "gpt2", g_tokenizer_dir, nullptr, 4096);
  EXPECT_THAT(bad.status().message(), HasSubstr("invalid UTF-8 at byte 9004"));
  EXPECT_EQ(PrepareTokenFile(Temp("none.txt"), Temp("x.bin"), "byte", "").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(PrepareTokenFile(getenv("TEST_TMPDIR"), Temp("x.bin"), "byte", "").status().message(),
              HasSubstr("is not a regular file"));
  EXPECT_FALSE(ReadFileToString(Temp("x.bin")).ok()) << "nothing is left behind";
}

}  // namespace
}  // namespace dtrain::client
