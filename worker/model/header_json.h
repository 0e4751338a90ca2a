// A small strict JSON parser for safetensors headers (RFC 8259 grammar, whole input consumed,
// whitespace allowed around the value, so space-padded headers parse).
//
// Why not protobuf's JsonStringToMessage into google.protobuf.Struct: Struct holds every number
// as a double, so byte offsets above 2^53 would be silently rounded and "1.5" or "1e3" accepted as
// offsets; duplicate keys silently keep the last value. This parser keeps each number's literal
// text (so integers are read exactly into int64), rejects duplicate keys, and reports the byte
// position of a syntax error. It does not validate UTF-8 inside strings (bytes pass through).
//
//   ASSIGN_OR_RETURN(JsonValue v, ParseJson(R"({"shape": [2, 3]})"));
//   const JsonValue* shape = v.Find("shape");   // kind() == kArray, items()[0].AsInt64() == 2
#ifndef DTRAIN_WORKER_MODEL_HEADER_JSON_H_
#define DTRAIN_WORKER_MODEL_HEADER_JSON_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrain {
namespace model {

class JsonValue {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };

  Kind kind() const { return kind_; }
  bool boolean() const { return boolean_; }
  // kString: the decoded string. kNumber: the number's literal text, e.g. "-12" or "1.5e3".
  const std::string& text() const { return text_; }
  // kArray: the elements. kObject: the values, parallel to keys(), in document order.
  const std::vector<JsonValue>& items() const { return items_; }
  const std::vector<std::string>& keys() const { return keys_; }

  // kObject: the value under `key`, or null.
  const JsonValue* Find(absl::string_view key) const;
  // kNumber written as an integer (no fraction or exponent) that fits int64; else nullopt.
  std::optional<int64_t> AsInt64() const;

 private:
  friend class JsonParser;
  Kind kind_ = Kind::kNull;
  bool boolean_ = false;
  std::string text_;
  std::vector<JsonValue> items_;
  std::vector<std::string> keys_;
};

// Parses `text` as one JSON value. InvalidArgument "at byte N: <problem>" on error.
// Nesting deeper than 64 levels is rejected (a header never needs more than 3).
absl::StatusOr<JsonValue> ParseJson(absl::string_view text);

// Appends `s` to `out` as a JSON string literal (quotes included, control characters escaped).
void AppendJsonString(absl::string_view s, std::string* out);

}  // namespace model
}  // namespace dtrain

#endif  // DTRAIN_WORKER_MODEL_HEADER_JSON_H_
