// UTF-8 decoding and the three Unicode classes GPT-2's pre-tokenizer needs: letters (\p{L}),
// numbers (\p{N}) and JavaScript's \s.
//
//   ASSIGN_OR_RETURN(std::vector<CodePoint> cps, DecodeUtf8("naïve 12"));
//   // cps[i].value: the code point; cps[i].offset, cps[i].size: its bytes in the input
//   IsLetter(U'ï') == true, IsNumber(U'²') == true, IsSpace(U'\u3000') == true
//
// Letters and numbers are Unicode general categories L* (Lu Ll Lt Lm Lo) and N* (Nd Nl No),
// looked up in ICU (libicu-dev; Debian 12's ICU 72 is Unicode 15.0). A reference encoder on a
// newer Unicode (node 20: Unicode 15.1+) can differ only on code points assigned after 15.0.
// IsSpace is ECMAScript's \s exactly: TAB LF VT FF CR, the Zs category (space separators),
// U+2028, U+2029 and U+FEFF; unlike Python's \s it excludes U+001C..U+001F and U+0085.
#ifndef DTRAIN_TOKENIZER_UNICODE_TEXT_H_
#define DTRAIN_TOKENIZER_UNICODE_TEXT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrain {
namespace tokenizer {

struct CodePoint {
  char32_t value;
  int64_t offset;  // of its first byte in the decoded text
  int size;        // bytes, 1..4
};

// Strict UTF-8 (RFC 3629): InvalidArgument "invalid UTF-8 at byte N: <why>" for a truncated or
// overlong sequence, a surrogate (U+D800..U+DFFF), a value above U+10FFFF or a stray byte.
// `first_byte`: where `text` starts in a larger text that is decoded part by part (N counts
// from there; CodePoint.offset stays within `text`).
absl::StatusOr<std::vector<CodePoint>> DecodeUtf8(absl::string_view text, int64_t first_byte = 0);

// `text` with each byte that does not belong to a valid character replaced by U+FFFD: printable
// text from any bytes (a sampled byte-level model's output).
std::string ReplaceInvalidUtf8(absl::string_view text);

bool IsLetter(char32_t c);
bool IsNumber(char32_t c);
bool IsSpace(char32_t c);

}  // namespace tokenizer
}  // namespace dtrain

#endif  // DTRAIN_TOKENIZER_UNICODE_TEXT_H_
