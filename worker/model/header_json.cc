#include "worker/model/header_json.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace dtrain {
namespace model {

constexpr int kMaxDepth = 64;

class JsonParser {
 public:
  explicit JsonParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<JsonValue> ParseDocument() {
    JsonValue value;
    SkipWhitespace();
    RETURN_IF_ERROR(ParseValue(0, &value));
    SkipWhitespace();
    if (pos_ != text_.size()) return Error("unexpected text after the JSON value");
    return value;
  }

 private:
  absl::Status Error(absl::string_view problem) const {
    return absl::InvalidArgumentError(absl::StrCat("at byte ", pos_, ": ", problem));
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }
  void SkipWhitespace() {
    while (!AtEnd() && (Peek() == ' ' || Peek() == '\t' || Peek() == '\n' || Peek() == '\r'))
      ++pos_;
  }
  bool Consume(char c) {
    if (Peek() != c || AtEnd()) return false;
    ++pos_;
    return true;
  }

  absl::Status ParseValue(int depth, JsonValue* out) {
    if (depth > kMaxDepth) return Error("nesting deeper than 64 levels");
    if (AtEnd()) return Error("unexpected end of input");
    char c = Peek();
    if (c == '{') return ParseObject(depth, out);
    if (c == '[') return ParseArray(depth, out);
    if (c == '"') {
      out->kind_ = JsonValue::Kind::kString;
      return ParseString(&out->text_);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber(out);
    if (ConsumeWord("true")) {
      out->kind_ = JsonValue::Kind::kBool;
      out->boolean_ = true;
      return absl::OkStatus();
    }
    if (ConsumeWord("false")) {
      out->kind_ = JsonValue::Kind::kBool;
      return absl::OkStatus();
    }
    if (ConsumeWord("null")) return absl::OkStatus();
    return Error(absl::StrFormat("unexpected character '%c'", c));
  }

  bool ConsumeWord(absl::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  absl::Status ParseObject(int depth, JsonValue* out) {
    out->kind_ = JsonValue::Kind::kObject;
    ++pos_;  // '{'
    SkipWhitespace();
    if (Consume('}')) return absl::OkStatus();
    absl::flat_hash_set<std::string> seen;  // JsonValue::Find is linear; headers can be large
    while (true) {
      SkipWhitespace();
      if (Peek() != '"' || AtEnd()) return Error("expected a string key");
      size_t key_pos = pos_;
      std::string key;
      RETURN_IF_ERROR(ParseString(&key));
      if (!seen.insert(key).second) {
        pos_ = key_pos;
        return Error(absl::StrCat("duplicate key \"", key, "\""));
      }
      SkipWhitespace();
      if (!Consume(':')) return Error("expected ':' after an object key");
      SkipWhitespace();
      JsonValue value;
      RETURN_IF_ERROR(ParseValue(depth + 1, &value));
      out->keys_.push_back(std::move(key));
      out->items_.push_back(std::move(value));
      SkipWhitespace();
      if (Consume('}')) return absl::OkStatus();
      if (!Consume(',')) return Error("expected ',' or '}' in an object");
    }
  }

  absl::Status ParseArray(int depth, JsonValue* out) {
    out->kind_ = JsonValue::Kind::kArray;
    ++pos_;  // '['
    SkipWhitespace();
    if (Consume(']')) return absl::OkStatus();
    while (true) {
      SkipWhitespace();
      JsonValue value;
      RETURN_IF_ERROR(ParseValue(depth + 1, &value));
      out->items_.push_back(std::move(value));
      SkipWhitespace();
      if (Consume(']')) return absl::OkStatus();
      if (!Consume(',')) return Error("expected ',' or ']' in an array");
    }
  }

  absl::Status ParseHex4(uint32_t* out) {
    if (pos_ + 4 > text_.size()) return Error("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = text_[pos_ + i];
      int digit = (c >= '0' && c <= '9')   ? c - '0'
                  : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                  : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                           : -1;
      if (digit < 0) return Error("invalid hex digit in \\u escape");
      v = v * 16 + static_cast<uint32_t>(digit);
    }
    pos_ += 4;
    *out = v;
    return absl::OkStatus();
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  absl::Status ParseString(std::string* out) {
    ++pos_;  // opening quote
    while (true) {
      if (AtEnd()) return Error("unterminated string");
      char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return absl::OkStatus();
      }
      if (static_cast<unsigned char>(c) < 0x20) return Error("control character in a string");
      ++pos_;
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (AtEnd()) return Error("unterminated string");
      char e = text_[pos_++];
      switch (e) {
        case '"':
          out->push_back('"');
          break;
        case '\\':
          out->push_back('\\');
          break;
        case '/':
          out->push_back('/');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t cp = 0;
          RETURN_IF_ERROR(ParseHex4(&cp));
          if (cp >= 0xDC00 && cp <= 0xDFFF) return Error("unpaired low surrogate in \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t low = 0;
            if (!ConsumeWord("\\u")) return Error("unpaired high surrogate in \\u escape");
            RETURN_IF_ERROR(ParseHex4(&low));
            if (low < 0xDC00 || low > 0xDFFF) return Error("unpaired high surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          --pos_;
          return Error(absl::StrFormat("invalid escape '\\%c'", e));
      }
    }
  }

  absl::Status ParseNumber(JsonValue* out) {
    size_t start = pos_;
    auto digits = [this] {
      size_t n = 0;
      while (!AtEnd() && Peek() >= '0' && Peek() <= '9') ++pos_, ++n;
      return n;
    };
    Consume('-');
    if (Consume('0')) {
      if (!AtEnd() && Peek() >= '0' && Peek() <= '9') return Error("leading zero in a number");
    } else if (digits() == 0) {
      return Error("expected a digit");
    }
    if (Consume('.') && digits() == 0) return Error("expected a digit after '.'");
    if (Consume('e') || Consume('E')) {
      if (!Consume('+')) Consume('-');
      if (digits() == 0) return Error("expected a digit in the exponent");
    }
    out->kind_ = JsonValue::Kind::kNumber;
    out->text_ = std::string(text_.substr(start, pos_ - start));
    return absl::OkStatus();
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

const JsonValue* JsonValue::Find(absl::string_view key) const {
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (keys_[i] == key) return &items_[i];
  }
  return nullptr;
}

std::optional<int64_t> JsonValue::AsInt64() const {
  if (kind_ != Kind::kNumber || text_.find_first_of(".eE") != std::string::npos)
    return std::nullopt;
  int64_t v;
  if (!absl::SimpleAtoi(text_, &v)) return std::nullopt;
  return v;
}

absl::StatusOr<JsonValue> ParseJson(absl::string_view text) {
  return JsonParser(text).ParseDocument();
}

void AppendJsonString(absl::string_view s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(out, "\\u%04x", static_cast<unsigned char>(c));
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

}  // namespace model
}  // namespace dtrain
