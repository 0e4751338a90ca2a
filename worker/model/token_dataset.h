// A token stream for training, mapped from its file (common/files.h MappedFile: the page
// cache's copy, shared by the workers of a host, larger than memory if need be), and its
// batching order (the order of
// llm.c's unshuffled single-process DataLoader; docs/DATA_FORMATS.md states it precisely).
//
//   ASSIGN_OR_RETURN(TokenDataset data, TokenDataset::Open("fineweb_train_000001.bin", 50257));
//   std::vector<int32_t> inputs(B * T), targets(B * T);
//   RETURN_IF_ERROR(data.GetBatch(step, B, T, absl::MakeSpan(inputs), absl::MakeSpan(targets)));
//
// Batch k, with n = num_tokens() and j = k mod ((n - 1) / (B*T)):
//   inputs[b*T + t]  = token[j*B*T + b*T + t]
//   targets[b*T + t] = token[j*B*T + b*T + t + 1]        for b in [0, B), t in [0, T)
// i.e. row b is the T+1 tokens starting at j*B*T + b*T; inputs its first T, targets its last T.
// Trailing tokens that do not fill a whole batch are never used.
#ifndef DTRAIN_WORKER_MODEL_TOKEN_DATASET_H_
#define DTRAIN_WORKER_MODEL_TOKEN_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/files.h"

namespace dtrain {
namespace model {

class TokenDataset {
 public:
  // The llm.c token file magic and the one version we read (uint16 tokens; version 2 is uint32).
  static constexpr int32_t kMagic = 20240520;
  static constexpr int32_t kVersion = 1;
  static constexpr int kHeaderInts = 256;

  // path ending in ".bin": llm.c token file: a header of 256 little-endian int32 (magic 20240520,
  // version 1, token count, the rest unused), then exactly that many uint16 tokens.
  // Any other path: plain text read as bytes, one token per byte (vocab 256).
  // Every token must be < vocab_size, else InvalidArgument naming the file, the first offending
  // position and value. Also: NotFound for a missing file; InvalidArgument for vocab_size <= 0,
  // a wrong magic, an unsupported version, or a file size that disagrees with the token count
  // (truncated, or trailing bytes).
  static absl::StatusOr<TokenDataset> Open(const std::string& path, int vocab_size);

  int64_t num_tokens() const { return num_tokens_; }

  // Batches per pass over the data: (num_tokens - 1) / (B*T).
  // InvalidArgument if B or T <= 0; FailedPrecondition (naming the file, the token count and
  // B*T+1) when the file is shorter than one batch.
  absl::StatusOr<int64_t> BatchesPerEpoch(int B, int T) const;

  // Writes batch k (any k >= 0; it wraps around every BatchesPerEpoch(B, T) batches) into
  // inputs and targets, B*T tokens each, row-major (B, T). Errors as BatchesPerEpoch, plus
  // InvalidArgument for k < 0 or spans whose size is not B*T.
  absl::Status GetBatch(int64_t k, int B, int T, absl::Span<int32_t> inputs,
                        absl::Span<int32_t> targets) const;

  const std::string& path() const { return path_; }

 private:
  TokenDataset() = default;
  int32_t Token(int64_t i) const;  // i in [0, num_tokens)
  // The position of the first token >= limit; num_tokens() when there is none.
  int64_t FirstTokenAtLeast(int limit) const;

  std::string path_;
  std::shared_ptr<const MappedFile> file_;  // the whole file; copies share it
  int64_t first_token_offset_ = 0;          // byte offset of token 0 in the file
  int token_bytes_ = 1;                     // 2 for .bin (uint16), 1 for text
  int64_t num_tokens_ = 0;
};

}  // namespace model
}  // namespace dtrain

#endif  // DTRAIN_WORKER_MODEL_TOKEN_DATASET_H_
