#include "tokenizer/pretokenize.h"

#include <cstdint>

#include "common/status_macros.h"
#include "tokenizer/unicode_text.h"

namespace dtrain {
namespace tokenizer {
namespace {

// [^\s\p{L}\p{N}]
bool IsOther(char32_t c) { return !IsSpace(c) && !IsLetter(c) && !IsNumber(c); }

// The length in code points of the piece that starts at cps[i] (at least 1).
size_t PieceLength(const std::vector<CodePoint>& cps, size_t i) {
  const size_t n = cps.size();
  auto at = [&](size_t k) -> char32_t { return k < n ? cps[k].value : 0; };
  // 's|'t|'re|'ve|'m|'ll|'d
  if (at(i) == U'\'') {
    const char32_t a = at(i + 1), b = at(i + 2);
    if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
    if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  }
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': the optional space, then a run of one class.
  for (bool (*in_class)(char32_t) : {&IsLetter, &IsNumber, &IsOther}) {
    const size_t start = (at(i) == U' ' && i + 1 < n && in_class(at(i + 1))) ? i + 1 : i;
    if (start >= n || !in_class(at(start))) continue;
    size_t end = start;
    while (end < n && in_class(at(end))) ++end;
    return end - i;
  }
  // \s+(?!\S) then \s+: the run of spaces, less its last one when a non-space follows it and
  // the run has more than one (the lookahead backtracks one space; a run of one is \s+).
  size_t end = i;
  while (end < n && IsSpace(at(end))) ++end;
  if (end < n && end - i >= 2) --end;
  return end - i;
}

}  // namespace

absl::StatusOr<std::vector<absl::string_view>> Pretokenize(absl::string_view text,
                                                           int64_t first_byte) {
  ASSIGN_OR_RETURN(const std::vector<CodePoint> cps, DecodeUtf8(text, first_byte));
  std::vector<absl::string_view> pieces;
  for (size_t i = 0; i < cps.size();) {
    const size_t length = PieceLength(cps, i);
    const CodePoint& last = cps[i + length - 1];
    pieces.push_back(text.substr(cps[i].offset, last.offset + last.size - cps[i].offset));
    i += length;
  }
  return pieces;
}

size_t LastSafeCut(absl::string_view text) {
  auto printable = [](char c) { return c > ' ' && c < 0x7F; };  // ASCII, not a space
  for (size_t p = text.size(); p-- > 1;) {
    if (text[p] == '\n' && printable(text[p - 1])) return p;
  }
  return 0;
}

}  // namespace tokenizer
}  // namespace dtrain
