#include "tokenizer/unicode_text.h"

#include <unicode/uchar.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dtrain {
namespace tokenizer {
namespace {

// Decodes the character at text[i]: its value and size, or why it is invalid (and the offset
// of the offending byte).
struct Decoded {
  char32_t value = 0;
  int size = 0;
  const char* invalid = nullptr;
  int64_t invalid_at = 0;
};

Decoded DecodeOne(absl::string_view text, int64_t i) {
  const int64_t n = static_cast<int64_t>(text.size());
  const unsigned char lead = static_cast<unsigned char>(text[i]);
  Decoded d;
  d.invalid_at = i;
  char32_t min_value;  // the smallest value this length may encode (less is overlong)
  if (lead < 0x80) {
    d.value = lead, d.size = 1;
    return d;
  } else if ((lead & 0xE0) == 0xC0) {
    d.size = 2, d.value = lead & 0x1F, min_value = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    d.size = 3, d.value = lead & 0x0F, min_value = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    d.size = 4, d.value = lead & 0x07, min_value = 0x10000;
  } else {
    d.invalid = "a byte that cannot start a character";
    return d;
  }
  if (i + d.size > n) {
    d.invalid = "truncated sequence at the end of the text";
    return d;
  }
  for (int k = 1; k < d.size; ++k) {
    const unsigned char cont = static_cast<unsigned char>(text[i + k]);
    if ((cont & 0xC0) != 0x80) {
      d.invalid = "expected a continuation byte", d.invalid_at = i + k;
      return d;
    }
    d.value = (d.value << 6) | (cont & 0x3F);
  }
  if (d.value < min_value) d.invalid = "overlong encoding";
  if (d.value >= 0xD800 && d.value <= 0xDFFF) d.invalid = "encoded surrogate";
  if (d.value > 0x10FFFF) d.invalid = "value above U+10FFFF";
  return d;
}

}  // namespace

absl::StatusOr<std::vector<CodePoint>> DecodeUtf8(absl::string_view text, int64_t first_byte) {
  std::vector<CodePoint> out;
  out.reserve(text.size());
  for (int64_t i = 0; i < static_cast<int64_t>(text.size());) {
    const Decoded d = DecodeOne(text, i);
    if (d.invalid != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid UTF-8 at byte ", first_byte + d.invalid_at, ": ", d.invalid));
    }
    out.push_back({d.value, i, d.size});
    i += d.size;
  }
  return out;
}

std::string ReplaceInvalidUtf8(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (int64_t i = 0; i < static_cast<int64_t>(text.size());) {
    const Decoded d = DecodeOne(text, i);
    if (d.invalid != nullptr) {
      out += "\xEF\xBF\xBD";
      i += 1;
    } else {
      out.append(text.data() + i, d.size);
      i += d.size;
    }
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
