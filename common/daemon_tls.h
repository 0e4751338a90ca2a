// The TLS flags of both daemons (dtrain-coordinator, dtrain-worker) and what they do with them
// at start: --tls_ca, --tls_cert, --tls_key (common/tls.h) or an explicit --insecure. Started
// with neither, a daemon refuses to start (exit 2, ValidateTlsFiles' one line); with
// --insecure it says LOUDLY that anyone who can reach its port controls the cluster, and its
// /metrics show it: dtrain_coordinator_tls_enabled / dtrain_worker_tls_enabled 0 (1 with TLS).
//
//   absl::StatusOr<TlsFiles> tls = TlsFilesFromFlags("the coordinator");
//   if (!tls.ok()) { fprintf(stderr, "dtrain-coordinator: error: %s\n", ...); return 2; }
//   AnnounceTls(*tls, "dtrain-coordinator", listen);
//   RETURN_IF_ERROR(ExportTlsMetric(*tls, "coordinator", &registry));
#ifndef DTRAIN_COMMON_DAEMON_TLS_H_
#define DTRAIN_COMMON_DAEMON_TLS_H_

#include <string>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/metrics/registry.h"
#include "common/tls.h"

ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(bool, insecure);

namespace dtrain {

// Exit status of a daemon whose TLS flags are missing or wrong (a usage error).
inline constexpr int kExitTlsUsage = 2;

// The flags as TlsFiles, validated (ValidateTlsFiles with `program`, e.g. "the coordinator").
absl::StatusOr<TlsFiles> TlsFilesFromFlags(absl::string_view program);

// One line on stderr at start: with TLS, the certificate in use ("TLS on: CN=w1 OU=worker,
// valid ... (CA certs/ca.pem)"); with --insecure the warning, naming `listen`.
void AnnounceTls(const TlsFiles& tls, absl::string_view binary, absl::string_view listen);

// The gauge dtrain_<component>_tls_enabled (component "coordinator" or "worker"): 1 with
// mutual TLS, 0 with --insecure.
absl::Status ExportTlsMetric(const TlsFiles& tls, absl::string_view component,
                             metrics::Registry* registry);

}  // namespace dtrain

#endif  // DTRAIN_COMMON_DAEMON_TLS_H_
