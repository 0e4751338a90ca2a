#include "worker/model/token_dataset.h"

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/host_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain {
namespace model {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) { return ::testing::TempDir() + name; }

void WriteRaw(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), bytes.size());
  ASSERT_TRUE(out.good()) << path;
}

struct BinOptions {
  int32_t magic = 20240520;
  int32_t version = 1;
  std::optional<int64_t> count;  // default: tokens.size()
  std::string trailing;
};

// Writes an llm.c token file: 256 int32 header, then uint16 tokens.
std::string WriteBin(const std::string& name, const std::vector<uint16_t>& tokens,
                     BinOptions opt = {}) {
  std::vector<int32_t> header(256, 0);
  header[0] = opt.magic;
  header[1] = opt.version;
  header[2] = static_cast<int32_t>(opt.count.value_or(tokens.size()));
  std::string bytes(reinterpret_cast<const char*>(header.data()), 1024);
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  bytes += opt.trailing;
  const std::string path = TempPath(name);
  WriteRaw(path, bytes);
  return path;
}

BinOptions Magic(int32_t magic) {
  BinOptions o;
  o.magic = magic;
  return o;
}
BinOptions Version(int32_t version) {
  BinOptions o;
  o.version = version;
  return o;
}
BinOptions Count(int64_t count) {
  BinOptions o;
  o.count = count;
  return o;
}
BinOptions Trailing(std::string trailing) {
  BinOptions o;
  o.trailing = std::move(trailing);
  return o;
}

std::vector<uint16_t> Iota(int n, uint16_t first) {
  std::vector<uint16_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<uint16_t>(first + i);
  return v;
}

void ExpectError(const absl::Status& s, absl::StatusCode code, const std::string& path,
                 const std::vector<std::string>& parts) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(path));
  for (const std::string& part : parts) EXPECT_THAT(std::string(s.message()), HasSubstr(part));
}

TEST(TokenDataset, OneBatchFileGivesInputsAndTargetsShiftedByOne) {
  const std::string path = WriteBin("seven.bin", {10, 11, 12, 13, 14, 15, 16});
  absl::StatusOr<TokenDataset> data = TokenDataset::Open(path, 50257);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->path(), path);
  EXPECT_EQ(data->num_tokens(), 7);
  EXPECT_EQ(data->BatchesPerEpoch(2, 3).value(), 1);  // (7 - 1) / 6
  std::vector<int32_t> in(6), tg(6);
  for (int64_t k : {0, 1, 5}) {  // every batch index wraps to the only batch
    ASSERT_TRUE(data->GetBatch(k, 2, 3, absl::MakeSpan(in), absl::MakeSpan(tg)).ok());
    EXPECT_THAT(in, ElementsAre(10, 11, 12, 13, 14, 15));  // rows {10,11,12} and {13,14,15}
    EXPECT_THAT(tg, ElementsAre(11, 12, 13, 14, 15, 16));
  }
}

TEST(TokenDataset, BatchKMatchesTheClosedFormAndWrapsAround) {
  // n = 23, B = 2, T = 3: (23 - 1) / 6 = 3 batches; tokens 19..22 are only ever a last target.
  const int n = 23, B = 2, T = 3;
  const std::string path = WriteBin("closed_form.bin", Iota(n, 1000));
  absl::StatusOr<TokenDataset> data = TokenDataset::Open(path, 50257);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->BatchesPerEpoch(B, T).value(), 3);
  std::vector<int32_t> in(B * T), tg(B * T);
  for (int64_t k = 0; k < 10; ++k) {
    ASSERT_TRUE(data->GetBatch(k, B, T, absl::MakeSpan(in), absl::MakeSpan(tg)).ok());
    const int64_t j = k % 3;
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        EXPECT_EQ(in[b * T + t], 1000 + j * B * T + b * T + t)
            << "k=" << k << " b=" << b << " t=" << t;
        EXPECT_EQ(tg[b * T + t], 1000 + j * B * T + b * T + t + 1)
            << "k=" << k << " b=" << b << " t=" << t;
      }
    }
  }
  // The last batch ends on token 18 as a target (n - 1 = 22 would need a 4th batch).
  ASSERT_TRUE(data->GetBatch(2, B, T, absl::MakeSpan(in), absl::MakeSpan(tg)).ok());
  EXPECT_THAT(in, ElementsAre(1012, 1013, 1014, 1015, 1016, 1017));
  EXPECT_THAT(tg, ElementsAre(1013, 1014, 1015, 1016, 1017, 1018));
}

TEST(TokenDataset, LastBatchMayUseTheFinalTokenAsATarget) {
  const std::string path = WriteBin("thirteen.bin", Iota(13, 0));
  absl::StatusOr<TokenDataset> data = TokenDataset::Open(path, 13);  // max token 12 < 13
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->BatchesPerEpoch(2, 3).value(), 2);
  std::vector<int32_t> in(6), tg(6);
  ASSERT_TRUE(data->GetBatch(1, 2, 3, absl::MakeSpan(in), absl::MakeSpan(tg)).ok());
  EXPECT_THAT(in, ElementsAre(6, 7, 8, 9, 10, 11));
  EXPECT_THAT(tg, ElementsAre(7, 8, 9, 10, 11, 12));
}

TEST(TokenDataset, TextFileIsOneTokenPerByte) {
  const std::string path = TempPath("hello.txt");
  WriteRaw(path, "hello world!");
  absl::StatusOr<TokenDataset> data = TokenDataset::Open(path, 256);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_tokens(), 12);
  EXPECT_EQ(data->BatchesPerEpoch(1, 4).value(), 2);  // 11 / 4
  std::vector<int32_t> in(4), tg(4);
  auto text = [](const std::vector<int32_t>& v) { return std::string(v.begin(), v.end()); };
  ASSERT_TRUE(data->GetBatch(1, 1, 4, absl::MakeSpan(in), absl::MakeSpan(tg)).ok());
  EXPECT_EQ(text(in), "o wo");
  EXPECT_EQ(text(tg), " wor");
  ASSERT_TRUE(data->GetBatch(2, 1, 4, absl::MakeSpan(in), absl::MakeSpan(tg)).ok());  // wraps to 0
  EXPECT_EQ(text(in), "hell");
  EXPECT_EQ(text(tg), "ello");

  WriteRaw(path, "ab\xff");  // bytes are unsigned: 0xff is token 255
  data = TokenDataset::Open(path, 256);
  ASSERT_TRUE(data.ok()) << data.status();
  in.resize(2), tg.resize(2);
  ASSERT_TRUE(data->GetBatch(0, 1, 2, absl::MakeSpan(in), absl::MakeSpan(tg)).ok());
  EXPECT_THAT(tg, ElementsAre('b', 255));
}

TEST(TokenDataset, TokenOutsideTheVocabularyIsNamedWithItsPosition) {
  const std::string path = WriteBin("big_token.bin", {1, 2, 50257, 3, 60000});
  ExpectError(TokenDataset::Open(path, 50257).status(), absl::StatusCode::kInvalidArgument, path,
              {"token 50257 at position 2 is >= vocab_size 50257"});
  EXPECT_TRUE(TokenDataset::Open(path, 65536).ok());

  const std::string text = TempPath("abc.txt");
  WriteRaw(text, "abc");
  ExpectError(TokenDataset::Open(text, 98).status(), absl::StatusCode::kInvalidArgument, text,
              {"token 98 at position 1 is >= vocab_size 98"});
  ExpectError(TokenDataset::Open(text, 0).status(), absl::StatusCode::kInvalidArgument, text,
              {"vocab_size must be positive, got 0"});
}

TEST(TokenDataset, FileShorterThanOneBatchIsFailedPrecondition) {
  const std::string path = WriteBin("six.bin", Iota(6, 0));
  absl::StatusOr<TokenDataset> data = TokenDataset::Open(path, 50257);
  ASSERT_TRUE(data.ok()) << data.status();
  ExpectError(data->BatchesPerEpoch(2, 3).status(), absl::StatusCode::kFailedPrecondition, path,
              {"6 tokens, but one batch of B=2 T=3 needs B*T+1 = 7"});
  std::vector<int32_t> in(6), tg(6);
  ExpectError(data->GetBatch(0, 2, 3, absl::MakeSpan(in), absl::MakeSpan(tg)),
              absl::StatusCode::kFailedPrecondition, path, {"needs B*T+1 = 7"});
  EXPECT_EQ(data->BatchesPerEpoch(1, 5).value(), 1);

  const std::string empty = TempPath("empty.txt");
  WriteRaw(empty, "");
  data = TokenDataset::Open(empty, 256);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_tokens(), 0);
  ExpectError(data->BatchesPerEpoch(1, 1).status(), absl::StatusCode::kFailedPrecondition, empty,
              {"0 tokens"});
}

TEST(TokenDataset, BadBatchArgumentsAreInvalidArgument) {
  const std::string path = WriteBin("args.bin", Iota(20, 0));
  absl::StatusOr<TokenDataset> data = TokenDataset::Open(path, 50257);
  ASSERT_TRUE(data.ok()) << data.status();
  std::vector<int32_t> in(6), tg(6), small(5);
  ExpectError(data->BatchesPerEpoch(0, 3).status(), absl::StatusCode::kInvalidArgument, path,
              {"must be positive, got B=0 T=3"});
  ExpectError(data->GetBatch(0, 2, -1, absl::MakeSpan(in), absl::MakeSpan(tg)),
              absl::StatusCode::kInvalidArgument, path, {"got B=2 T=-1"});
  ExpectError(data->GetBatch(-1, 2, 3, absl::MakeSpan(in), absl::MakeSpan(tg)),
              absl::StatusCode::kInvalidArgument, path, {"batch index must be >= 0, got -1"});
  ExpectError(data->GetBatch(0, 2, 3, absl::MakeSpan(in), absl::MakeSpan(small)),
              absl::StatusCode::kInvalidArgument, path, {"must hold B*T = 6 tokens, got 6 and 5"});
}

TEST(TokenDataset, MalformedBinFilesAreRejected) {
  std::string path = WriteBin("magic.bin", Iota(10, 0), Magic(20240521));
  ExpectError(TokenDataset::Open(path, 50257).status(), absl::StatusCode::kInvalidArgument, path,
              {"bad magic 20240521 (expected 20240520"});

  path = WriteBin("version.bin", Iota(10, 0), Version(2));
  ExpectError(TokenDataset::Open(path, 50257).status(), absl::StatusCode::kInvalidArgument, path,
              {"unsupported version 2"});

  path = WriteBin("truncated.bin", Iota(9, 0), Count(10));
  ExpectError(
      TokenDataset::Open(path, 50257).status(), absl::StatusCode::kInvalidArgument, path,
      {"header says 10 tokens (1044 bytes in all) but the file has 1042 bytes (truncated)"});

  path = WriteBin("trailing.bin", Iota(10, 0), Trailing("x"));
  ExpectError(TokenDataset::Open(path, 50257).status(), absl::StatusCode::kInvalidArgument, path,
              {"(trailing bytes)"});

  path = WriteBin("negative.bin", {}, Count(-5));
  ExpectError(TokenDataset::Open(path, 50257).status(), absl::StatusCode::kInvalidArgument, path,
              {"negative token count -5"});

  path = TempPath("short_header.bin");
  WriteRaw(path, std::string(100, '\0'));
  ExpectError(TokenDataset::Open(path, 50257).status(), absl::StatusCode::kInvalidArgument, path,
              {"file is 100 bytes, too short for the 1024-byte llm.c token header"});
}

TEST(TokenDataset, MissingFileIsNotFound) {
  const std::string path = TempPath("missing.bin");
  ExpectError(TokenDataset::Open(path, 50257).status(), absl::StatusCode::kNotFound, path, {});
}

TEST(TokenDataset, CopiesShareTheTokens) {
  const std::string path = WriteBin("copy.bin", Iota(8, 5));
  std::optional<TokenDataset> copy;
  {
    absl::StatusOr<TokenDataset> data = TokenDataset::Open(path, 50257);
    ASSERT_TRUE(data.ok()) << data.status();
    copy = *data;
  }
  std::vector<int32_t> in(7), tg(7);
  ASSERT_TRUE(copy->GetBatch(0, 1, 7, absl::MakeSpan(in), absl::MakeSpan(tg)).ok());
  EXPECT_THAT(in, ElementsAreArray({5, 6, 7, 8, 9, 10, 11}));
  EXPECT_THAT(tg, ElementsAreArray({6, 7, 8, 9, 10, 11, 12}));
}

// The file is mapped, not copied: a 256 MiB token file (sparse: every token 0) opens without the
// process holding 256 MiB it cannot drop (common/host_memory.h ResidentBytes: file pages are not
// counted), and a bad token at its very end is still found and named.
TEST(TokenDataset, ALargeFileIsMappedNotCopiedAndCheckedToItsEnd) {
  const int64_t count = int64_t{1} << 27;
  const std::string path = WriteBin("large.bin", {});
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(0);
    const int32_t header[3] = {20240520, 1, static_cast<int32_t>(count)};
    f.write(reinterpret_cast<const char*>(header), sizeof(header));
  }
  ASSERT_EQ(truncate(path.c_str(), 1024 + 2 * count), 0);
  const absl::StatusOr<int64_t> before = ResidentBytes();
  ASSERT_TRUE(before.ok()) << before.status();
  absl::StatusOr<TokenDataset> data = TokenDataset::Open(path, 256);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_tokens(), count);
  const absl::StatusOr<int64_t> after = ResidentBytes();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_LT(*after - *before, int64_t{64} << 20) << "the dataset was copied into memory";

  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(1024 + 2 * (count - 1));
    const uint16_t last = 300;
    f.write(reinterpret_cast<const char*>(&last), sizeof(last));
  }
  EXPECT_THAT(
      TokenDataset::Open(path, 256).status().message(),
      HasSubstr(absl::StrCat("token 300 at position ", count - 1, " is >= vocab_size 256")));
}

}  // namespace
}  // namespace model
}  // namespace dtrain
