#include "common/utf8.h"

#include <cstdint>

#include "absl/strings/str_format.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace dtrain {
namespace {

// The length of the valid UTF-8 sequence at the start of `s`, or 0 when it is not one.
size_t ValidSequenceLength(absl::string_view s) {
  const auto byte = [&s](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t b0 = byte(0);
  if (b0 < 0x80) return 1;
  size_t n;
  uint32_t min, cp;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2, min = 0x80, cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3, min = 0x800, cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4, min = 0x10000, cp = b0 & 0x07;
  } else {
    return 0;  // a continuation byte, or 0xF8..0xFF
  }
  if (s.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

int FixMessage(google::protobuf::Message* message) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* reflection = message->GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(*message, &fields);  // the fields that are set
  int changed = 0;
  for (const FieldDescriptor* field : fields) {
    if (field->type() == FieldDescriptor::TYPE_STRING) {
      if (field->is_repeated()) {
        for (int i = 0; i < reflection->FieldSize(*message, field); ++i) {
          const std::string value = reflection->GetRepeatedString(*message, field, i);
          if (IsValidUtf8(value)) continue;
          reflection->SetRepeatedString(message, field, i, EscapeInvalidUtf8(value));
          ++changed;
        }
      } else {
        const std::string value = reflection->GetString(*message, field);
        if (IsValidUtf8(value)) continue;
        reflection->SetString(message, field, EscapeInvalidUtf8(value));
        ++changed;
      }
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      // Map entries are repeated messages too: their string keys and values are fixed here.
      if (field->is_repeated()) {
        for (int i = 0; i < reflection->FieldSize(*message, field); ++i) {
          changed += FixMessage(reflection->MutableRepeatedMessage(message, field, i));
        }
      } else {
        changed += FixMessage(reflection->MutableMessage(message, field));
      }
    }
  }
  return changed;
}

}  // namespace

bool IsValidUtf8(absl::string_view text) {
  while (!text.empty()) {
    const size_t n = ValidSequenceLength(text);
    if (n == 0) return false;
    text.remove_prefix(n);
  }
  return true;
}

std::string EscapeInvalidUtf8(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const size_t n = ValidSequenceLength(text);
    if (n == 0) {
      absl::StrAppendFormat(&out, "\\x%02x", static_cast<uint8_t>(text[0]));
      text.remove_prefix(1);
    } else {
      out.append(text.data(), n);
      text.remove_prefix(n);
    }
  }
  return out;
}

int MakeStringsValidUtf8(google::protobuf::Message* message) { return FixMessage(message); }

}  // namespace dtrain
