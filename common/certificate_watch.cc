#include "common/certificate_watch.h"

#include <openssl/x509.h>
#include <time.h>

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/status_macros.h"
#include "common/x509.h"

namespace dtrain {

absl::StatusOr<CertificateExpiry> ReadCertificateExpiry(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string pem, ReadFileToString(path));
  X509Ptr cert = ParseCertificatePem(pem);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a PEM certificate"));
  }
  struct tm tm {};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert.get()), &tm) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": its notAfter time cannot be read"));
  }
  CertificateExpiry expiry;
  expiry.not_after_unix = static_cast<int64_t>(timegm(&tm));
  char cn[256] = {}, ou[256] = {};
  const X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_get_text_by_NID(const_cast<X509_NAME*>(subject), NID_commonName, cn, sizeof cn);
  X509_NAME_get_text_by_NID(const_cast<X509_NAME*>(subject), NID_organizationalUnitName, ou,
                            sizeof ou);
  expiry.description = absl::StrCat("CN=", cn, ou[0] != '\0' ? absl::StrCat(" OU=", ou) : "",
                                    " expires ", FormatAsn1Time(X509_get0_notAfter(cert.get())));
  return expiry;
}

absl::StatusOr<std::unique_ptr<CertificateWatch>> CertificateWatch::Start(
    const TlsFiles& tls, absl::string_view binary, metrics::Registry* registry,
    absl::Duration interval) {
  ASSIGN_OR_RETURN(metrics::Family<metrics::Gauge> * family,
                   registry->AddGauge("dtrain_tls_certificate_expiry_timestamp_seconds",
                                      "notAfter of this daemon's TLS certificate "
                                      "(file=\"certificate\", --tls_cert) and of its CA "
                                      "(file=\"ca\", --tls_ca), seconds since the Unix epoch; "
                                      "absent with --insecure",
                                      {"file"}));
  if (tls.insecure) {
    return std::unique_ptr<CertificateWatch>(
        new CertificateWatch(tls, std::string(binary), nullptr, nullptr));
  }
  std::unique_ptr<CertificateWatch> watch(
      new CertificateWatch(tls, std::string(binary), &family->Add({{"file", "certificate"}}),
                           &family->Add({{"file", "ca"}})));
  watch->Check();
  watch->thread_ = std::thread([w = watch.get(), interval] { w->Loop(interval); });
  return watch;
}

CertificateWatch::CertificateWatch(TlsFiles tls, std::string binary, metrics::Gauge* certificate,
                                   metrics::Gauge* ca)
    : tls_(std::move(tls)), binary_(std::move(binary)), certificate_(certificate), ca_(ca) {}

CertificateWatch::~CertificateWatch() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void CertificateWatch::Loop(absl::Duration interval) {
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stop_), interval)) {
    mu_.Unlock();
    Check();
    mu_.Lock();
  }
}

void CertificateWatch::Check() {
  absl::StatusOr<std::string> cert_pem = ReadFileToString(tls_.cert);
  absl::StatusOr<std::string> ca_pem = ReadFileToString(tls_.ca);
  if (!cert_pem.ok() || !ca_pem.ok()) return;  // mid-replacement: read again next time
  std::string contents = absl::StrCat(*cert_pem, *ca_pem);
  if (contents == seen_) return;
  const bool first = seen_.empty();
  seen_ = std::move(contents);
  absl::StatusOr<CertificateExpiry> cert = ReadCertificateExpiry(tls_.cert);
  absl::StatusOr<CertificateExpiry> ca = ReadCertificateExpiry(tls_.ca);
  if (cert.ok()) certificate_->Set(static_cast<double>(cert->not_after_unix));
  if (ca.ok()) ca_->Set(static_cast<double>(ca->not_after_unix));
  const auto say = [](const absl::StatusOr<CertificateExpiry>& e) {
    return e.ok() ? e->description : std::string(e.status().message());
  };
  std::fprintf(stderr, "%s: %s: certificate %s %s; CA %s %s\n", binary_.c_str(),
               first ? "TLS files" : "TLS files changed (served to new connections from now on)",
               tls_.cert.c_str(), say(cert).c_str(), tls_.ca.c_str(), say(ca).c_str());
}

}  // namespace dtrain
