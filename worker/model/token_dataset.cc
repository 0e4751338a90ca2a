#include "worker/model/token_dataset.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/status_macros.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token files are read as little-endian");

namespace dtrain {
namespace model {
namespace {

template <typename... Args>
absl::Status Invalid(const std::string& path, const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", args...));
}

}  // namespace

absl::StatusOr<TokenDataset> TokenDataset::Open(const std::string& path, int vocab_size) {
  if (vocab_size <= 0) return Invalid(path, "vocab_size must be positive, got ", vocab_size);
  ASSIGN_OR_RETURN(std::shared_ptr<const MappedFile> file, MappedFile::Open(path));
  const absl::string_view bytes = file->bytes();
  const int64_t size = static_cast<int64_t>(bytes.size());

  TokenDataset data;
  data.path_ = path;
  if (absl::EndsWith(path, ".bin")) {
    constexpr int64_t kHeaderBytes = kHeaderInts * sizeof(int32_t);
    if (size < kHeaderBytes) {
      return Invalid(path, "file is ", size, " bytes, too short for the ", kHeaderBytes,
                     "-byte llm.c token header");
    }
    int32_t header[3];
    std::memcpy(header, bytes.data(), sizeof(header));
    if (header[0] != kMagic) {
      return Invalid(path, "bad magic ", header[0], " (expected ", kMagic,
                     ", an llm.c token file)");
    }
    if (header[1] != kVersion) {
      return Invalid(path, "unsupported version ", header[1], " (only version ", kVersion,
                     ", uint16 tokens, is read)");
    }
    const int64_t count = header[2];
    if (count < 0) return Invalid(path, "negative token count ", count);
    const int64_t want = kHeaderBytes + 2 * count;
    if (size != want) {
      return Invalid(path, "header says ", count, " tokens (", want,
                     " bytes in all) but the file has ", size, " bytes",
                     size < want ? " (truncated)" : " (trailing bytes)");
    }
    data.first_token_offset_ = kHeaderBytes;
    data.token_bytes_ = 2;
    data.num_tokens_ = count;
  } else {
    data.first_token_offset_ = 0;
    data.token_bytes_ = 1;
    data.num_tokens_ = size;
  }
  data.file_ = std::move(file);

  // One pass over every token, in order; batches are then read where the step is.
  data.file_->Advise(MADV_SEQUENTIAL);
  const int64_t first_bad = data.FirstTokenAtLeast(vocab_size);
  data.file_->Advise(MADV_NORMAL);
  if (first_bad < data.num_tokens_) {
    return Invalid(path, "token ", data.Token(first_bad), " at position ", first_bad,
                   " is >= vocab_size ", vocab_size);
  }
  return data;
}

int64_t TokenDataset::FirstTokenAtLeast(int limit) const {
  // The largest token of each block, a loop the compiler vectorizes (a 4 GB file in about a
  // second once cached; token by token it took 10 s), then the block that has one found token
  // by token.
  constexpr int64_t kBlock = int64_t{1} << 16;
  const char* base = file_->bytes().data() + first_token_offset_;
  for (int64_t begin = 0; begin < num_tokens_; begin += kBlock) {
    const int64_t end = std::min(num_tokens_, begin + kBlock);
    int largest = 0;
    if (token_bytes_ == 1) {
      const auto* t = reinterpret_cast<const unsigned char*>(base);
      for (int64_t i = begin; i < end; ++i) largest = std::max<int>(largest, t[i]);
    } else {  // uint16 at an even offset of a page-aligned mapping: aligned
      const auto* t = reinterpret_cast<const uint16_t*>(base);
      for (int64_t i = begin; i < end; ++i) largest = std::max<int>(largest, t[i]);
    }
    if (largest < limit) continue;
    for (int64_t i = begin; i < end; ++i) {
      if (Token(i) >= limit) return i;
    }
  }
  return num_tokens_;
}

int32_t TokenDataset::Token(int64_t i) const {
  const char* p = file_->bytes().data() + first_token_offset_ + i * token_bytes_;
  if (token_bytes_ == 1) return static_cast<unsigned char>(*p);
  uint16_t token;
  std::memcpy(&token, p, 2);
  return token;
}

absl::StatusOr<int64_t> TokenDataset::BatchesPerEpoch(int B, int T) const {
  if (B <= 0 || T <= 0) {
    return Invalid(path_, "batch size B and sequence length T must be positive, got B=", B,
                   " T=", T);
  }
  const int64_t batch = static_cast<int64_t>(B) * T;
  if (num_tokens_ < batch + 1) {
    return absl::FailedPreconditionError(absl::StrCat(path_, ": ", num_tokens_,
                                                      " tokens, but one batch of B=", B, " T=", T,
                                                      " needs B*T+1 = ", batch + 1));
  }
  return (num_tokens_ - 1) / batch;
}

absl::Status TokenDataset::GetBatch(int64_t k, int B, int T, absl::Span<int32_t> inputs,
                                    absl::Span<int32_t> targets) const {
  ASSIGN_OR_RETURN(int64_t batches, BatchesPerEpoch(B, T));
  if (k < 0) return Invalid(path_, "batch index must be >= 0, got ", k);
  const int64_t batch = static_cast<int64_t>(B) * T;
  if (static_cast<int64_t>(inputs.size()) != batch ||
      static_cast<int64_t>(targets.size()) != batch) {
    return Invalid(path_, "inputs and targets must hold B*T = ", batch, " tokens, got ",
                   inputs.size(), " and ", targets.size());
  }
  // Batch j covers tokens [j*B*T, (j+1)*B*T + 1); inputs and targets are that range shifted by one.
  const int64_t start = (k % batches) * batch;
  for (int64_t i = 0; i < batch; ++i) {
    inputs[i] = Token(start + i);
    targets[i] = Token(start + i + 1);
  }
  return absl::OkStatus();
}

}  // namespace model
}  // namespace dtrain
