// Status propagation helpers. Abseil 20220623 has no public RETURN_IF_ERROR / ASSIGN_OR_RETURN,
// so dtrain defines them once, here.
//
//   RETURN_IF_ERROR(file.Read(&header));
//   ASSIGN_OR_RETURN(Tensor t, reader.Get("wte.weight"));
#ifndef DTRAIN_COMMON_STATUS_MACROS_H_
#define DTRAIN_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define DTRAIN_STATUS_CONCAT_INNER(a, b) a##b
#define DTRAIN_STATUS_CONCAT(a, b) DTRAIN_STATUS_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status dtrain_status_ = (expr);          \
    if (!dtrain_status_.ok()) return dtrain_status_; \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  DTRAIN_ASSIGN_OR_RETURN_IMPL(DTRAIN_STATUS_CONCAT(dtrain_statusor_, __LINE__), lhs, expr)

#define DTRAIN_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr)  \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

namespace dtrain {

// Returns `status` with "context: " prepended to its message, keeping the code. Used to say where
// an error happened: Annotate(s, "while reading model.safetensors").
inline absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

}  // namespace dtrain

#endif  // DTRAIN_COMMON_STATUS_MACROS_H_
