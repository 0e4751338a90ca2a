// Test helpers for metrics: a minimal HTTP/1.1 client for loopback and Debian's promtool.
#ifndef DTRAIN_COMMON_METRICS_TESTING_H_
#define DTRAIN_COMMON_METRICS_TESTING_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dtrain::metrics::testing {

struct HttpResponse {
  int code = 0;
  std::string headers;  // the header lines, "\r\n"-separated, as received
  std::string body;
  // The value of header `name` (case-insensitive), "" when absent.
  std::string Header(const std::string& name) const;
};

// `method path` to 127.0.0.1:port with "Connection: close", reading until the server closes.
absl::StatusOr<HttpResponse> HttpRequest(int port, const std::string& path,
                                         const std::string& method = "GET");

// Runs `promtool check metrics` (Debian's prometheus package; tools/setup.sh installs it) over
// `text`. FailedPrecondition with promtool's output when it finds a problem (it also lints:
// counters end in _total, units are base units, every family has help); NotFound when promtool
// is not installed.
absl::Status PromtoolCheckMetrics(const std::string& text);

}  // namespace dtrain::metrics::testing

#endif  // DTRAIN_COMMON_METRICS_TESTING_H_
