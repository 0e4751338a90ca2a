// OpenSSL's X.509 certificates and keys as owned values, and the few helpers that common/tls,
// `dtrain certs` (client/certs) and the CLI's TLS probe (common/tls_probe) share.
#ifndef DTRAIN_COMMON_X509_H_
#define DTRAIN_COMMON_X509_H_

#include <openssl/evp.h>
#include <openssl/x509.h>

#include <memory>
#include <string>

#include "absl/strings/string_view.h"

namespace dtrain {

struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using X509Ptr = std::unique_ptr<X509, X509Deleter>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyDeleter>;

// The first certificate / private key of a PEM text; null when there is none (OpenSSL's error
// queue is cleared either way).
X509Ptr ParseCertificatePem(absl::string_view pem);
PkeyPtr ParsePrivateKeyPem(absl::string_view pem);

// "2020-01-01 00:00:00 UTC"; "?" for a time OpenSSL cannot convert.
std::string FormatAsn1Time(const ASN1_TIME* time);

}  // namespace dtrain

#endif  // DTRAIN_COMMON_X509_H_
