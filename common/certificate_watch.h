// What a daemon says about its TLS files while it runs: the notAfter time of its certificate and
// of its CA as the gauge dtrain_tls_certificate_expiry_timestamp_seconds{file="certificate"|"ca"}
// (seconds since the Unix epoch; the alert TlsCertificateExpiresSoon fires 14 days ahead), and a
// log line whenever the files change (gRPC's file watcher, common/tls.h, serves the new ones to
// new connections within its reload interval):
//
//   dtrain-worker: TLS files changed: certificate certs/w1.pem CN=w1 OU=worker expires
//   2027-11-27 08:00:00 UTC; CA certs/ca.pem expires 2036-11-25 08:00:00 UTC
//
//   ASSIGN_OR_RETURN(std::unique_ptr<CertificateWatch> watch,
//                    CertificateWatch::Start(tls, "dtrain-worker", &registry));
//
// Nothing is watched for --insecure (Start returns a watch that does nothing).
#ifndef DTRAIN_COMMON_CERTIFICATE_WATCH_H_
#define DTRAIN_COMMON_CERTIFICATE_WATCH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics/registry.h"
#include "common/tls.h"

namespace dtrain {

// The notAfter of the first certificate in the PEM file at `path`, in seconds since the epoch,
// and its one-line description ("CN=w1 OU=worker expires 2027-11-27 08:00:00 UTC").
struct CertificateExpiry {
  int64_t not_after_unix = 0;
  std::string description;
};
absl::StatusOr<CertificateExpiry> ReadCertificateExpiry(const std::string& path);

class CertificateWatch {
 public:
  // Reads the files once (logging the first line as "TLS certificate ...") and then every
  // `interval`; `binary` prefixes the log lines.
  static absl::StatusOr<std::unique_ptr<CertificateWatch>> Start(
      const TlsFiles& tls, absl::string_view binary, metrics::Registry* registry,
      absl::Duration interval = absl::Seconds(10));
  ~CertificateWatch();  // stops and joins the thread

 private:
  CertificateWatch(TlsFiles tls, std::string binary, metrics::Gauge* certificate,
                   metrics::Gauge* ca);
  // Reads both files; logs and sets the gauges when their contents changed since last time.
  void Check();
  void Loop(absl::Duration interval);

  const TlsFiles tls_;
  const std::string binary_;
  metrics::Gauge* const certificate_;
  metrics::Gauge* const ca_;
  std::string seen_;  // the files' contents at the last Check (Check's thread only)
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace dtrain

#endif  // DTRAIN_COMMON_CERTIFICATE_WATCH_H_
