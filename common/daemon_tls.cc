#include "common/daemon_tls.h"

#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

ABSL_FLAG(std::string, tls_ca, "",
          "PEM file of the cluster CA: peers must present a certificate it signed (make one "
          "with `dtrain certs init DIR`)");
ABSL_FLAG(std::string, tls_cert, "", "PEM file of this daemon's certificate (CN name, OU role)");
ABSL_FLAG(std::string, tls_key, "", "PEM file of its private key");
ABSL_FLAG(bool, insecure, false,
          "run without TLS: plaintext and unauthenticated, anyone who can reach the ports "
          "controls the cluster (instead of --tls_ca, --tls_cert and --tls_key)");

namespace dtrain {

absl::StatusOr<TlsFiles> TlsFilesFromFlags(absl::string_view program) {
  TlsFiles tls;
  tls.ca = absl::GetFlag(FLAGS_tls_ca);
  tls.cert = absl::GetFlag(FLAGS_tls_cert);
  tls.key = absl::GetFlag(FLAGS_tls_key);
  tls.insecure = absl::GetFlag(FLAGS_insecure);
  RETURN_IF_ERROR(ValidateTlsFiles(tls, program));
  return tls;
}

void AnnounceTls(const TlsFiles& tls, absl::string_view binary, absl::string_view listen) {
  if (tls.insecure) {
    std::fprintf(stderr,
                 "%s: WARNING: --insecure: every connection to %s is plaintext and "
                 "unauthenticated: anyone who can reach it controls the cluster (start with "
                 "--tls_ca, --tls_cert and --tls_key instead; `dtrain certs init DIR` makes "
                 "them)\n",
                 std::string(binary).c_str(), std::string(listen).c_str());
    return;
  }
  absl::StatusOr<std::string> described = DescribeCertificateFile(tls.cert);
  std::fprintf(stderr, "%s: mutual TLS on: certificate %s (%s), CA %s\n",
               std::string(binary).c_str(), tls.cert.c_str(),
               described.ok() ? described->c_str() : "unreadable", tls.ca.c_str());
}

absl::Status ExportTlsMetric(const TlsFiles& tls, absl::string_view component,
                             metrics::Registry* registry) {
  ASSIGN_OR_RETURN(metrics::Family<metrics::Gauge> * family,
                   registry->AddGauge(absl::StrCat("dtrain_", component, "_tls_enabled"),
                                      "1 when every gRPC channel of this daemon uses mutual TLS; "
                                      "0 when it was started with --insecure",
                                      {}));
  family->Add({}).Set(tls.enabled() ? 1 : 0);
  return absl::OkStatus();
}

}  // namespace dtrain
