// The one conversion between absl::Status (used everywhere inside) and grpc::Status (on the
// wire), at each service edge. Codes map one to one; the message is kept.
#ifndef DTRAIN_COMMON_GRPC_STATUS_H_
#define DTRAIN_COMMON_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace dtrain {

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

inline absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace dtrain

#endif  // DTRAIN_COMMON_GRPC_STATUS_H_
