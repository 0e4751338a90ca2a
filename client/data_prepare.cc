#include "client/data_prepare.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/status_macros.h"
#include "tokenizer/gpt2_bpe.h"

namespace dtrain {
namespace client {

absl::StatusOr<PreparedTokens> PrepareTokenFile(const std::string& in_path,
                                                const std::string& out_path,
                                                const std::string& tokenizer,
                                                const std::string& tokenizer_dir) {
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(in_path));
  PreparedTokens prepared;
  prepared.bytes = static_cast<int64_t>(text.size());
  std::vector<int32_t> ids;
  if (tokenizer == "byte") {
    ids.assign(text.begin(), text.end());
    for (int32_t& id : ids) id &= 0xFF;
    prepared.vocab_size = 256;
  } else if (tokenizer == "gpt2") {
    absl::StatusOr<tokenizer::Gpt2Bpe> bpe = tokenizer::Gpt2Bpe::Load(tokenizer_dir);
    if (absl::IsNotFound(bpe.status())) {
      return absl::NotFoundError(absl::StrCat(
          bpe.status().message(),
          " (tools/setup.sh fetches GPT-2's tokenizer; --tokenizer_dir says where it is)"));
    }
    RETURN_IF_ERROR(bpe.status());
    absl::StatusOr<std::vector<int32_t>> encoded = bpe->Encode(text);
    if (!encoded.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(in_path, ": ", encoded.status().message()));
    }
    ids = *std::move(encoded);
    prepared.vocab_size = bpe->vocab_size();
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown tokenizer '", tokenizer, "' (gpt2 or byte)"));
  }
  ASSIGN_OR_RETURN(const std::string contents, tokenizer::TokenFileContents(ids));
  RETURN_IF_ERROR(WriteFileAtomically(out_path, contents));
  prepared.tokens = static_cast<int64_t>(ids.size());
  return prepared;
}

}  // namespace client
}  // namespace dtrain
