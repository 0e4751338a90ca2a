// GPT-2's pre-tokenizer: the text cut into the pieces that byte-pair encoding then encodes one
// at a time. It is the regular expression of GPT-2's encoder.py, as the gpt-3-encoder package
// runs it in JavaScript (flags gu: matched on code points, \s is ECMAScript's):
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// implemented without a regex library: at each position the first alternative that matches,
// with the backtracking the regex does (" ?" gives up its space when no letter follows;
// \s+(?!\S) gives back the last space before a non-space, which then starts the next piece).
// Every character falls in one alternative, so the pieces concatenate to the whole text.
//
//   Pretokenize("Hello world's  12\n") -> {"Hello", " world", "'s", " ", " 12", "\n"}
#ifndef DTRAIN_TOKENIZER_PRETOKENIZE_H_
#define DTRAIN_TOKENIZER_PRETOKENIZE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrain {
namespace tokenizer {

// The pieces, views into `text`. InvalidArgument for text that is not valid UTF-8 (DecodeUtf8,
// with `first_byte`).
absl::StatusOr<std::vector<absl::string_view>> Pretokenize(absl::string_view text,
                                                           int64_t first_byte = 0);

// Where `text` may be cut so that the pieces of the two parts are those of the whole (for a
// large text encoded part by part): the last position p of a '\n' after a printable ASCII
// character, cut before the newline (no alternative runs from a non-space into a space, and
// the lookahead of \s+(?!\S) only looks past spaces, so a piece ends at p whatever follows;
// the reference test's chunking, tokenizer/gpt2_node_test.py); 0 when there is none.
size_t LastSafeCut(absl::string_view text);

}  // namespace tokenizer
}  // namespace dtrain

#endif  // DTRAIN_TOKENIZER_PRETOKENIZE_H_
