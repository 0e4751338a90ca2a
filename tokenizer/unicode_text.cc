#include "tokenizer/unicode_text.h"

#include <unicode/uchar.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dtrain {
namespace tokenizer {
namespace {

absl::Status Invalid(int64_t offset, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("invalid UTF-8 at byte ", offset, ": ", why));
}

}  // namespace

absl::StatusOr<std::vector<CodePoint>> DecodeUtf8(absl::string_view text) {
  std::vector<CodePoint> out;
  out.reserve(text.size());
  const int64_t n = static_cast<int64_t>(text.size());
  for (int64_t i = 0; i < n;) {
    const unsigned char lead = static_cast<unsigned char>(text[i]);
    int size;
    char32_t value;
    char32_t min_value;  // the smallest value this length may encode (shorter is overlong)
    if (lead < 0x80) {
      out.push_back({lead, i, 1});
      ++i;
      continue;
    } else if ((lead & 0xE0) == 0xC0) {
      size = 2, value = lead & 0x1F, min_value = 0x80;
    } else if ((lead & 0xF0) == 0xE0) {
      size = 3, value = lead & 0x0F, min_value = 0x800;
    } else if ((lead & 0xF8) == 0xF0) {
      size = 4, value = lead & 0x07, min_value = 0x10000;
    } else {
      return Invalid(i, absl::StrCat("byte 0x", absl::Hex(lead), " cannot start a character"));
    }
    if (i + size > n) return Invalid(i, "truncated sequence at the end of the text");
    for (int k = 1; k < size; ++k) {
      const unsigned char cont = static_cast<unsigned char>(text[i + k]);
      if ((cont & 0xC0) != 0x80) return Invalid(i + k, "expected a continuation byte");
      value = (value << 6) | (cont & 0x3F);
    }
    if (value < min_value) return Invalid(i, "overlong encoding");
    if (value >= 0xD800 && value <= 0xDFFF) return Invalid(i, "encoded surrogate");
    if (value > 0x10FFFF) return Invalid(i, "value above U+10FFFF");
    out.push_back({value, i, size});
    i += size;
  }
  return out;
}

bool IsLetter(char32_t c) { return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_L_MASK) != 0; }

bool IsNumber(char32_t c) { return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_N_MASK) != 0; }

bool IsSpace(char32_t c) {
  switch (c) {
    case U'\t':
    case U'\n':
    case U'\v':
    case U'\f':
    case U'\r':
    case 0x2028:  // line separator
    case 0x2029:  // paragraph separator
    case 0xFEFF:  // zero width no-break space (byte order mark)
      return true;
    default:
      return u_charType(static_cast<UChar32>(c)) == U_SPACE_SEPARATOR;
  }
}

}  // namespace tokenizer
}  // namespace dtrain
