#include "plan/spec_json.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "plan/spec_bounds.h"

namespace dtrain::plan {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

// Levenshtein distance, for "did you mean" hints on short field names.
int EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int up = row[j];
      const bool same = absl::ascii_tolower(a[i - 1]) == absl::ascii_tolower(b[j - 1]);
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The closest field name within 2 edits; ties go to the longer common prefix ("tpp" -> "tp").
std::string Suggestion(const Descriptor& message, absl::string_view key) {
  std::string best;
  std::pair<int, int> best_score = {3, 0};  // (edits, -common prefix)
  for (int i = 0; i < message.field_count(); ++i) {
    const std::string& name = message.field(i)->name();
    int prefix = 0;
    while (prefix < static_cast<int>(std::min(key.size(), name.size())) &&
           key[prefix] == name[prefix]) {
      ++prefix;
    }
    const std::pair<int, int> score = {EditDistance(key, name), -prefix};
    if (score < best_score) {
      best_score = score;
      best = name;
    }
  }
  return best.empty() ? "" : absl::StrCat(" (did you mean \"", best, "\"?)");
}

// Collects every key of `object` that `message` has no field for, with its JSON path. Protobuf's
// own parser stops at the first one; this reports them all.
void FindUnknownFields(const google::protobuf::Struct& object, const Descriptor& message,
                       const std::string& path, std::vector<std::string>* problems) {
  // Map order is unspecified; sort so the message is stable.
  std::vector<std::string> keys;
  for (const auto& [key, value] : object.fields()) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  for (const std::string& key : keys) {
    const google::protobuf::Value& value = object.fields().at(key);
    const std::string field_path = path.empty() ? key : absl::StrCat(path, ".", key);
    const FieldDescriptor* field = message.FindFieldByName(key);
    for (int i = 0; field == nullptr && i < message.field_count(); ++i) {
      if (message.field(i)->json_name() == key) field = message.field(i);
    }
    if (field == nullptr) {
      problems->push_back(
          absl::StrCat("unknown field \"", field_path, "\"", Suggestion(message, key)));
      continue;
    }
    if (field->type() != FieldDescriptor::TYPE_MESSAGE) continue;
    if (value.has_struct_value()) {
      FindUnknownFields(value.struct_value(), *field->message_type(), field_path, problems);
    } else if (value.has_list_value()) {
      for (int i = 0; i < value.list_value().values_size(); ++i) {
        const google::protobuf::Value& item = value.list_value().values(i);
        if (!item.has_struct_value()) continue;
        FindUnknownFields(item.struct_value(), *field->message_type(),
                          absl::StrCat(field_path, "[", i, "]"), problems);
      }
    }
  }
}

}  // namespace

namespace {

// Finds the first syntax error of a JSON text, for a message a user can act on ("line 7,
// column 12: expected ',' or '}' after a field's value, found '\"'") instead of protobuf's
// parser wording. Columns count bytes from 1. Only syntax: what the values mean is protobuf's.
class JsonSyntaxChecker {
 public:
  explicit JsonSyntaxChecker(absl::string_view text) : text_(text) {}

  // "" when `text` is one well-formed JSON value (with only whitespace around it).
  std::string FirstError() {
    if (!Value()) return error_;
    SkipSpace();
    if (pos_ < text_.size()) Fail("text after the end of the JSON object");
    return error_;
  }

 private:
  bool Value() {
    SkipSpace();
    if (pos_ >= text_.size()) return Fail("expected a value");
    const char c = text_[pos_];
    if (c == '{') return Container('}');
    if (c == '[') return Container(']');
    if (c == '"') return String();
    if (c == '-' || absl::ascii_isdigit(static_cast<unsigned char>(c))) return Number();
    for (absl::string_view word : {"true", "false", "null"}) {
      if (absl::StartsWith(text_.substr(pos_), word)) {
        pos_ += word.size();
        return true;
      }
    }
    return Fail("expected a value (a string needs double quotes)");
  }

  // An object ({"key": value, ...}) or an array ([value, ...]) at pos_.
  bool Container(char close) {
    const bool object = close == '}';
    ++pos_;
    SkipSpace();
    if (At(close)) return ++pos_, true;
    while (true) {
      if (object) {
        SkipSpace();
        if (!At('"')) return Fail("expected a field name in double quotes");
        if (!String()) return false;
        SkipSpace();
        if (!At(':')) return Fail("expected ':' after the field name");
        ++pos_;
      }
      if (!Value()) return false;
      SkipSpace();
      if (At(',')) {
        ++pos_;
        continue;
      }
      if (At(close)) return ++pos_, true;
      return Fail(object ? "expected ',' or '}' after a field's value"
                         : "expected ',' or ']' after an array element");
    }
  }

  bool String() {
    ++pos_;  // the opening quote
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '"') return ++pos_, true;
      if (c == '\n') return Fail("a string must end on the line it starts (missing '\"'?)");
      if (c == '\\') {
        ++pos_;
        if (pos_ >= text_.size() || !absl::StrContains("\"\\/bfnrtu", text_[pos_])) {
          return Fail("bad escape in a string");
        }
      }
      ++pos_;
    }
    return Fail("a string is not closed (missing '\"')");
  }

  bool Number() {
    const size_t start = pos_;
    if (At('-')) ++pos_;
    const auto digits = [&] {
      const size_t from = pos_;
      while (pos_ < text_.size() && absl::ascii_isdigit(static_cast<unsigned char>(text_[pos_]))) {
        ++pos_;
      }
      return pos_ > from;
    };
    bool ok = digits();
    if (ok && At('.')) ++pos_, ok = digits();
    if (ok && (At('e') || At('E'))) {
      ++pos_;
      if (At('+') || At('-')) ++pos_;
      ok = digits();
    }
    if (!ok) {
      pos_ = start;
      return Fail("bad number");
    }
    return true;
  }

  bool At(char c) const { return pos_ < text_.size() && text_[pos_] == c; }

  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }

  // Records "line L, column C: what, found X" for pos_; returns false.
  bool Fail(absl::string_view what) {
    const absl::string_view before = text_.substr(0, pos_);
    const size_t line_start = before.rfind('\n');
    const size_t column = line_start == absl::string_view::npos ? pos_ + 1 : pos_ - line_start;
    const std::string found = pos_ >= text_.size() ? "the end of the file"
                                                   : absl::StrCat("'", text_.substr(pos_, 1), "'");
    error_ = absl::StrCat("line ", std::count(before.begin(), before.end(), '\n') + 1, ", column ",
                          column, ": ", what, ", found ", found);
    return false;
  }

  absl::string_view text_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace

absl::Status ReadJobSpecJson(absl::string_view json, JobSpec* spec,
                             std::vector<std::string>* problems) {
  // Bounds first: protobuf's reader is quadratic in the depth (spec_bounds.h).
  RETURN_IF_ERROR(CheckSpecJsonBounds(json));
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const google::protobuf::StringPiece text(json.data(), json.size());

  // Pass 1: syntax, and every unknown field with its path.
  google::protobuf::Struct object;
  auto status = google::protobuf::util::JsonStringToMessage(text, &object, options);
  if (!status.ok()) {
    const std::string syntax = JsonSyntaxChecker(json).FirstError();
    if (!syntax.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("job spec is not valid JSON: ", syntax));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("job spec is not a JSON object: ", std::string(status.message())));
  }
  FindUnknownFields(object, *JobSpec::descriptor(), "", problems);
  // Pass 2: types and values, past the unknown fields already reported.
  options.ignore_unknown_fields = true;
  status = google::protobuf::util::JsonStringToMessage(text, spec, options);
  if (!status.ok()) {
    problems->push_back(std::string(status.message()));
    return InvalidSpec(*problems);
  }
  return absl::OkStatus();
}

absl::Status InvalidSpec(absl::Span<const std::string> problems) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid job spec: ", absl::StrJoin(problems, "; ")));
}

absl::Status InvalidSpec(absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("invalid job spec: ", problem));
}

absl::StatusOr<JobSpec> ParseJobSpecJson(absl::string_view json) {
  JobSpec spec;
  std::vector<std::string> problems;
  RETURN_IF_ERROR(ReadJobSpecJson(json, &spec, &problems));
  if (!problems.empty()) {
    return InvalidSpec(problems);
  }
  return spec;
}

}  // namespace dtrain::plan
