#include "coordinator/request_bounds.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/reflection.h"

namespace dtrain::coordinator {
namespace {

using google::protobuf::FieldDescriptor;

constexpr int kMaxRepeatedStrings = 256;

absl::Status TooLong(const FieldDescriptor& field, size_t bytes, int64_t cap) {
  return absl::InvalidArgumentError(
      absl::StrCat("field ", field.name(), " is ", bytes, " bytes, above the cap of ", cap));
}

}  // namespace

int64_t RequestStringCap(absl::string_view field) {
  if (field == "job_id" || field == "running_job_id") return 64;
  if (field == "worker_id" || field == "session_id" || field == "address" ||
      field == "host_label") {
    return 256;
  }
  if (field == "reason") return 1024;
  return 4096;
}

absl::Status CheckRequestBounds(const google::protobuf::Message& request) {
  const google::protobuf::Reflection& reflection = *request.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection.ListFields(request, &fields);
  for (const FieldDescriptor* field : fields) {
    if (field->type() != FieldDescriptor::TYPE_STRING || field->name() == "spec_json" ||
        field->name() == "event") {
      continue;
    }
    const int64_t cap = RequestStringCap(field->name());
    if (!field->is_repeated()) {
      const size_t bytes = reflection.GetStringReference(request, field, nullptr).size();
      if (static_cast<int64_t>(bytes) > cap) return TooLong(*field, bytes, cap);
      continue;
    }
    const int n = reflection.FieldSize(request, field);
    if (n > kMaxRepeatedStrings) {
      return absl::InvalidArgumentError(absl::StrCat(
          "field ", field->name(), " has ", n, " entries, above the cap of ", kMaxRepeatedStrings));
    }
    std::string scratch;
    for (int i = 0; i < n; ++i) {
      const size_t bytes =
          reflection.GetRepeatedStringReference(request, field, i, &scratch).size();
      if (static_cast<int64_t>(bytes) > cap) return TooLong(*field, bytes, cap);
    }
  }
  return absl::OkStatus();
}

}  // namespace dtrain::coordinator
