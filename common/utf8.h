// Text that must cross a protobuf `string` field: proto3 refuses to serialise (or, at the far
// end, to parse) a string that is not valid UTF-8, and gRPC then answers an empty INTERNAL.
// Text quoted from files, paths and peers (a damaged manifest, a dataset name with Latin-1
// bytes) is made valid here, at the places messages are built.
//
//   EscapeInvalidUtf8("caf\xe9.txt") == "caf\\xe9.txt"   // the byte spelled out, 4 characters
//   EscapeInvalidUtf8("café") == "café"                  // valid UTF-8 kept as it is
//
//   ReportProgressRequest r = ...;
//   MakeStringsValidUtf8(&r);  // every string field, in nested and repeated messages too
#ifndef DTRAIN_COMMON_UTF8_H_
#define DTRAIN_COMMON_UTF8_H_

#include <string>

#include "absl/strings/string_view.h"

namespace google::protobuf {
class Message;
}  // namespace google::protobuf

namespace dtrain {

// Whether `text` is valid UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF).
bool IsValidUtf8(absl::string_view text);

// `text` with every byte that is not part of a valid UTF-8 sequence written as the four
// characters \xNN (lower-case hex); valid sequences are kept. Idempotent on its output.
std::string EscapeInvalidUtf8(absl::string_view text);

// Applies EscapeInvalidUtf8 to every `string` field of `message` (singular, repeated and map
// values), recursing into message fields; `bytes` fields are left alone. Returns how many
// fields it changed.
int MakeStringsValidUtf8(google::protobuf::Message* message);

}  // namespace dtrain

#endif  // DTRAIN_COMMON_UTF8_H_
