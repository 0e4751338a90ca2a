#include "common/tls.h"

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <utility>
#include <vector>

#include "absl/base/const_init.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/files.h"
#include "common/status_macros.h"
#include "common/x509.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace dtrain {
namespace {

absl::StatusOr<std::string> ReadFlagFile(absl::string_view flag, const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  if (!bytes.ok()) return Annotate(bytes.status(), absl::StrCat("--", flag));
  return bytes;
}

absl::StatusOr<X509Ptr> ReadCertificate(absl::string_view flag, const std::string& path) {
  ASSIGN_OR_RETURN(std::string pem, ReadFlagFile(flag, path));
  X509Ptr cert = ParseCertificatePem(pem);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " ", path,
                     " is not a PEM certificate (expected '-----BEGIN CERTIFICATE-----')"));
  }
  return cert;
}

// The first entry `nid` (NID_commonName, NID_organizationalUnitName) of `name`, or "".
std::string NameEntry(const X509_NAME* name, int nid) {
  int index = X509_NAME_get_index_by_NID(name, nid, -1);
  if (index < 0) return "";
  const ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, index));
  unsigned char* utf8 = nullptr;
  int length = ASN1_STRING_to_UTF8(&utf8, data);
  if (length < 0) return "";
  std::string value(reinterpret_cast<char*>(utf8), static_cast<size_t>(length));
  OPENSSL_free(utf8);
  return value;
}

}  // namespace

absl::Status ValidateTlsFiles(const TlsFiles& files, absl::string_view program) {
  const bool any = !files.ca.empty() || !files.cert.empty() || !files.key.empty();
  if (files.insecure) {
    if (!any) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(program,
                     " was given --insecure and TLS files (--tls_ca, --tls_cert, --tls_key) "
                     "together: pass either the three TLS files or --insecure, not both"));
  }
  if (!any) {
    return absl::InvalidArgumentError(
        absl::StrCat(program,
                     " needs --tls_ca, --tls_cert and --tls_key (make them with `dtrain certs "
                     "init DIR`), or --insecure to run without TLS (anyone who can reach the port "
                     "controls the cluster)"));
  }
  std::vector<std::string> missing;
  if (files.ca.empty()) missing.push_back("--tls_ca");
  if (files.cert.empty()) missing.push_back("--tls_cert");
  if (files.key.empty()) missing.push_back("--tls_key");
  if (!missing.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(program, " needs --tls_ca, --tls_cert and --tls_key together; missing ",
                     absl::StrJoin(missing, " and ")));
  }
  RETURN_IF_ERROR(ReadCertificate("tls_ca", files.ca).status());
  ASSIGN_OR_RETURN(X509Ptr cert, ReadCertificate("tls_cert", files.cert));
  ASSIGN_OR_RETURN(std::string key_pem, ReadFlagFile("tls_key", files.key));
  PkeyPtr key = ParsePrivateKeyPem(key_pem);
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_key ", files.key,
                     " is not a PEM private key (expected '-----BEGIN PRIVATE KEY-----')"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("--tls_key ", files.key,
                                                   " is not the private key of --tls_cert ",
                                                   files.cert, " (they do not match)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const TlsFiles& files, absl::Duration reload_interval) {
  RETURN_IF_ERROR(ValidateTlsFiles(files, "the server"));
  if (files.insecure) return grpc::InsecureServerCredentials();
  // gRPC's file watcher re-reads all three files every interval and swaps them in when they
  // changed (for new handshakes); existing connections keep their session.
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      files.key, files.cert, files.ca,
      static_cast<unsigned int>(std::max<int64_t>(1, absl::ToInt64Seconds(reload_interval))));
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  return grpc::experimental::TlsServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const TlsFiles& files, absl::Duration reload_interval) {
  if (files.insecure) {
    RETURN_IF_ERROR(ValidateTlsFiles(files, "the client"));
    return grpc::InsecureChannelCredentials();
  }
  // The same file watcher as servers: a long-lived channel (a worker's to the coordinator)
  // makes its next connection with renewed files. Each watcher has a thread of its own, so one
  // process shares one per set of files (a worker's peer channels, heartbeat_load's 1,000
  // simulated workers); every channel still makes its own handshake. The files are validated
  // (read and parsed) once, when their credentials are made, not on every new peer channel.
  const unsigned int interval =
      static_cast<unsigned int>(std::max<int64_t>(1, absl::ToInt64Seconds(reload_interval)));
  const std::string key = absl::StrCat(files.ca, "\n", files.cert, "\n", files.key, "\n", interval);
  static absl::Mutex mu(absl::kConstInit);
  static auto* shared =
      new absl::flat_hash_map<std::string, std::shared_ptr<grpc::ChannelCredentials>>();
  absl::MutexLock lock(&mu);
  std::shared_ptr<grpc::ChannelCredentials>& credentials = (*shared)[key];
  if (credentials == nullptr) {
    RETURN_IF_ERROR(ValidateTlsFiles(files, "the client"));
    auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        files.key, files.cert, files.ca, interval);
    grpc::experimental::TlsChannelCredentialsOptions options;
    options.set_certificate_provider(provider);
    options.watch_root_certs();
    options.watch_identity_key_cert_pairs();
    credentials = grpc::experimental::TlsCredentials(options);
  }
  return credentials;
}

void SetPeerChannelArguments(const TlsFiles& files, grpc::ChannelArguments* args) {
  if (files.insecure) return;
  args->SetSslTargetNameOverride(kWorkerPeerHostname);
}

absl::StatusOr<PeerIdentity> PeerIdentityOf(const grpc::AuthContext& auth) {
  // "tls" from TlsServerCredentials, "ssl" from SslServerCredentials, "insecure" otherwise.
  std::vector<grpc::string_ref> type = auth.FindPropertyValues("transport_security_type");
  const std::string security = type.empty() ? "" : std::string(type[0].data(), type[0].size());
  if (security != "tls" && security != "ssl") {
    return PeerIdentity{"", kRoleInsecure};
  }
  std::vector<grpc::string_ref> pem = auth.FindPropertyValues("x509_pem_cert");
  if (pem.empty()) {
    return absl::UnauthenticatedError("the caller presented no client certificate");
  }
  const absl::string_view pem_text(pem[0].data(), pem[0].size());
  // Parsing the PEM costs OpenSSL 3 about 0.25 ms (its decoder set-up), which was half the
  // coordinator's CPU at 1,000 heartbeats/s over TLS; a connection presents the same
  // certificate on every call, so identities are remembered by certificate text (the
  // handshake has verified it; only successful parses are kept, and at most 4096).
  static absl::Mutex mu(absl::kConstInit);
  static auto* known = new absl::flat_hash_map<std::string, PeerIdentity>();
  {
    absl::MutexLock lock(&mu);
    if (auto it = known->find(pem_text); it != known->end()) return it->second;
  }
  X509Ptr cert = ParseCertificatePem(pem_text);
  if (cert == nullptr) {
    return absl::UnauthenticatedError("the caller's certificate could not be parsed");
  }
  const X509_NAME* subject = X509_get_subject_name(cert.get());
  PeerIdentity identity{NameEntry(subject, NID_commonName),
                        NameEntry(subject, NID_organizationalUnitName)};
  if (identity.name.empty() || identity.role.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "the caller's certificate needs a subject CN (its name) and OU (its role); it has CN='",
        identity.name, "' OU='", identity.role, "'"));
  }
  absl::MutexLock lock(&mu);
  if (known->size() >= 4096) known->clear();
  known->emplace(pem_text, identity);
  return identity;
}

absl::StatusOr<PeerIdentity> PeerIdentityOf(const grpc::ServerContextBase& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr) return PeerIdentity{"", kRoleInsecure};
  return PeerIdentityOf(*auth);
}

absl::StatusOr<std::string> DescribeCertificateFile(const std::string& path) {
  ASSIGN_OR_RETURN(X509Ptr cert, ReadCertificate("tls_cert", path));
  const X509_NAME* subject = X509_get_subject_name(cert.get());
  return absl::StrCat("CN=", NameEntry(subject, NID_commonName),
                      " OU=", NameEntry(subject, NID_organizationalUnitName), ", valid ",
                      FormatAsn1Time(X509_get0_notBefore(cert.get())), " to ",
                      FormatAsn1Time(X509_get0_notAfter(cert.get())));
}

}  // namespace dtrain
