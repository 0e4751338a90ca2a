// The length caps of the strings a request carries at its top level (ids, reasons, addresses),
// checked at the service edge before anything reads them: an error that quoted a megabyte-long
// id would not fit in a gRPC status and the client would read only gRPC's metadata-size error.
// The spec inside a SubmitJobRequest has its own caps (plan/spec_bounds.h); a worker's event
// line (ReportProgressRequest.event) has none but the message's: a refused report would cost
// the worker its job, and no error quotes an event.
#ifndef DTRAIN_COORDINATOR_REQUEST_BOUNDS_H_
#define DTRAIN_COORDINATOR_REQUEST_BOUNDS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace dtrain::coordinator {

// The longest value of a top-level string field named `field`: 64 bytes for job ids (job_id,
// running_job_id), 256 for worker and session ids, addresses and host labels, 1024 for a
// reason, 4096 for a path (each allowed_roots entry) and anything else. (Not checked:
// SubmitJobRequest.spec_json, capped by --max_spec_bytes, and ReportProgressRequest.event.)
int64_t RequestStringCap(absl::string_view field);

// InvalidArgument "field job_id is 1048576 bytes, above the cap of 64" for the first top-level
// string field (or element of a repeated one) of `request` above its cap, and "field
// allowed_roots has 5000 entries, above the cap of 256" for a repeated string field; OK
// otherwise. Nested messages are not looked into.
absl::Status CheckRequestBounds(const google::protobuf::Message& request);

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_REQUEST_BOUNDS_H_
