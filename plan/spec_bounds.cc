#include "plan/spec_bounds.h"

#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/reflection.h"
#include "plan/spec_json.h"

namespace dtrain::plan {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

absl::Status TooLong(absl::string_view what, int64_t bytes, int64_t cap, size_t at) {
  return InvalidSpec(
      absl::StrCat(what, " is ", bytes, " bytes, above the cap of ", cap, " (at byte ", at, ")"));
}

// One open object or array of the scan.
struct Level {
  bool object = false;
  int64_t items = 1;      // arrays: elements so far (commas + 1)
  absl::string_view key;  // objects: the key whose value comes next
};

// The end of the string whose opening quote is at `start` (one past its closing quote), or
// npos when it is not closed.
size_t StringEnd(absl::string_view json, size_t start) {
  for (size_t i = start + 1; i < json.size(); ++i) {
    if (json[i] == '\\') {
      ++i;
    } else if (json[i] == '"') {
      return i + 1;
    }
  }
  return absl::string_view::npos;
}

absl::Status CheckFields(const Message& message, const std::string& path) {
  const google::protobuf::Reflection& reflection = *message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection.ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    const std::string name = path.empty() ? field->name() : absl::StrCat(path, ".", field->name());
    if (field->type() == FieldDescriptor::TYPE_MESSAGE && !field->is_repeated()) {
      if (absl::Status s = CheckFields(reflection.GetMessage(message, field), name); !s.ok()) {
        return s;
      }
    }
    if (field->type() != FieldDescriptor::TYPE_STRING || field->is_repeated()) continue;
    const int64_t bytes = static_cast<int64_t>(reflection.GetString(message, field).size());
    const int64_t cap = SpecStringCap(field->name());
    if (bytes > cap) {
      return InvalidSpec(
          absl::StrCat("field \"", name, "\" is ", bytes, " bytes, above the cap of ", cap));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int64_t SpecStringCap(absl::string_view field) {
  if (field == "name") return 256;
  for (absl::string_view path :
       {"dataset", "init_checkpoint", "initCheckpoint", "resume_from", "resumeFrom", "dir"}) {
    if (field == path) return 4096;
  }
  return 64;
}

absl::Status CheckSpecJsonBounds(absl::string_view json) {
  std::vector<Level> open;  // at most kMaxSpecDepth entries
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (c == '{' || c == '[') {
      if (static_cast<int>(open.size()) == kMaxSpecDepth) {
        return InvalidSpec(absl::StrCat("nesting depth exceeds ", kMaxSpecDepth, " at byte ", i));
      }
      open.push_back(Level{c == '{'});
    } else if (c == '}' || c == ']') {
      if (!open.empty()) open.pop_back();
    } else if (c == ',' && !open.empty() && !open.back().object) {
      if (++open.back().items > kMaxSpecArrayItems) {
        return InvalidSpec(absl::StrCat("an array has more than ", kMaxSpecArrayItems,
                                        " elements (at byte ", i, ")"));
      }
    } else if (c == '"') {
      const size_t end = StringEnd(json, i);
      if (end == absl::string_view::npos) return absl::OkStatus();  // the parser says where
      const int64_t bytes = static_cast<int64_t>(end - i - 2);
      size_t next = end;
      while (next < json.size() && absl::ascii_isspace(static_cast<unsigned char>(json[next]))) {
        ++next;
      }
      const bool key =
          !open.empty() && open.back().object && next < json.size() && json[next] == ':';
      if (key) {
        if (bytes > kMaxSpecKeyBytes) return TooLong("a field name", bytes, kMaxSpecKeyBytes, i);
        open.back().key = json.substr(i + 1, end - i - 2);
      } else {
        // A string in an array is capped as the field holding the array.
        absl::string_view field;
        for (auto it = open.rbegin(); it != open.rend() && field.empty(); ++it) {
          if (it->object) field = it->key;
        }
        const int64_t cap = SpecStringCap(field);
        if (bytes > cap) {
          return TooLong(absl::StrCat("field \"", field.empty() ? "(top level)" : field, "\""),
                         bytes, cap, i);
        }
      }
      i = end - 1;
    } else if (c != ':' && c != ',' && !absl::ascii_isspace(static_cast<unsigned char>(c))) {
      // A number or a word (true, null, or something malformed): a parser's error quotes it.
      size_t end = i;
      while (end < json.size() && !absl::ascii_isspace(static_cast<unsigned char>(json[end])) &&
             std::string_view("{}[],:\"").find(json[end]) == std::string_view::npos) {
        ++end;
      }
      const int64_t bytes = static_cast<int64_t>(end - i);
      if (bytes > kMaxSpecKeyBytes) return TooLong("a value", bytes, kMaxSpecKeyBytes, i);
      i = end - 1;
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSpecFieldLengths(const JobSpec& spec) { return CheckFields(spec, ""); }

}  // namespace dtrain::plan
