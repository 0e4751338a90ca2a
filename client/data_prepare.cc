#include "client/data_prepare.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "common/status_macros.h"
#include "tokenizer/gpt2_bpe.h"
#include "tokenizer/pretokenize.h"

namespace dtrain {
namespace client {
namespace {

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};

}  // namespace

absl::StatusOr<PreparedTokens> PrepareTokenFile(const std::string& in_path,
                                                const std::string& out_path,
                                                const std::string& tokenizer,
                                                const std::string& tokenizer_dir,
                                                const ProgressSink& progress, size_t part_bytes) {
  std::optional<tokenizer::Gpt2Bpe> bpe;
  PreparedTokens prepared;
  if (tokenizer == "byte") {
    prepared.vocab_size = 256;
  } else if (tokenizer == "gpt2") {
    absl::StatusOr<tokenizer::Gpt2Bpe> loaded = tokenizer::Gpt2Bpe::Load(tokenizer_dir);
    if (absl::IsNotFound(loaded.status())) {
      return absl::NotFoundError(absl::StrCat(
          loaded.status().message(),
          " (tools/setup.sh fetches GPT-2's tokenizer; --tokenizer_dir says where it is)"));
    }
    RETURN_IF_ERROR(loaded.status());
    bpe = *std::move(loaded);
    prepared.vocab_size = bpe->vocab_size();
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown tokenizer '", tokenizer, "' (gpt2 or byte)"));
  }
  std::unique_ptr<FILE, FileCloser> in(std::fopen(in_path.c_str(), "rb"));
  struct stat st;
  if (in == nullptr || fstat(fileno(in.get()), &st) != 0) {
    const int err = errno;
    const std::string why = absl::StrCat("cannot open ", in_path, ": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(why) : absl::InvalidArgumentError(why);
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(in_path, " is not a regular file"));
  }
  const int64_t total = st.st_size;
  // The header's count is written last, over a placeholder.
  ASSIGN_OR_RETURN(AtomicFileWriter out, AtomicFileWriter::Create(out_path));
  ASSIGN_OR_RETURN(const std::string placeholder, tokenizer::TokenFileHeader(0));
  RETURN_IF_ERROR(out.Append(placeholder));

  const absl::Time start = absl::Now();
  absl::Time reported = start;
  std::string text;     // read, not yet encoded
  int64_t text_at = 0;  // its first byte's offset in the file
  std::vector<int32_t> ids;
  std::vector<char> block(std::max<size_t>(part_bytes, 1));
  for (bool at_end = false; !at_end;) {
    const size_t n = std::fread(block.data(), 1, block.size(), in.get());
    if (n < block.size()) {
      if (std::ferror(in.get())) {
        return absl::DataLossError(absl::StrCat("cannot read ", in_path, " after byte ",
                                                text_at + static_cast<int64_t>(text.size())));
      }
      at_end = true;
    }
    text.append(block.data(), n);
    // The part to encode now: all of it at the end, else up to its last safe cut.
    const size_t cut = at_end || !bpe.has_value() ? text.size() : tokenizer::LastSafeCut(text);
    if (cut == 0) continue;
    const absl::string_view part(text.data(), cut);
    if (bpe.has_value()) {
      absl::StatusOr<std::vector<int32_t>> encoded = bpe->Encode(part, text_at);
      if (!encoded.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(in_path, ": ", encoded.status().message()));
      }
      ids = *std::move(encoded);
    } else {
      ids.assign(part.begin(), part.end());
      for (int32_t& id : ids) id &= 0xFF;
    }
    ASSIGN_OR_RETURN(const std::string tokens, tokenizer::TokenFileTokens(ids, prepared.tokens));
    RETURN_IF_ERROR(out.Append(tokens));
    prepared.tokens += static_cast<int64_t>(ids.size());
    text_at += static_cast<int64_t>(cut);
    text.erase(0, cut);
    if (progress && absl::Now() - reported >= absl::Seconds(5)) {
      reported = absl::Now();
      const double seconds = absl::ToDoubleSeconds(reported - start);
      progress(absl::StrFormat("%.1f of %.1f MB (%.0f%%), %d tokens, %.1f MB/s", text_at / 1e6,
                               total / 1e6, total > 0 ? 100.0 * text_at / total : 100.0,
                               prepared.tokens, text_at / 1e6 / seconds));
    }
  }
  prepared.bytes = text_at;
  ASSIGN_OR_RETURN(const std::string header, tokenizer::TokenFileHeader(prepared.tokens));
  RETURN_IF_ERROR(out.OverwriteAt(0, header));
  RETURN_IF_ERROR(out.Commit());
  return prepared;
}

}  // namespace client
}  // namespace dtrain
