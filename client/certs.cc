#include "client/certs.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/files.h"
#include "common/job_paths.h"
#include "common/status_macros.h"
#include "common/tls.h"
#include "common/x509.h"

namespace dtrain {
namespace client {
namespace {

struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioDeleter>;

constexpr absl::Duration kClockSkew = absl::Minutes(5);

absl::Status OpenSslError(absl::string_view what) {
  std::string detail;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    absl::StrAppend(&detail, detail.empty() ? "" : "; ", buf);
  }
  return absl::InternalError(absl::StrCat(what, ": ", detail.empty() ? "no detail" : detail));
}

// A PEM text from a writer callback on a memory BIO.
template <typename Write>
absl::StatusOr<std::string> ToPem(Write write, absl::string_view what) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!write(bio.get())) return OpenSslError(absl::StrCat("cannot write ", what));
  char* data = nullptr;
  long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

// Creates `path` with `mode`, refusing to replace an existing file.
absl::Status WriteNewFile(const std::string& path, const std::string& contents, mode_t mode) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    if (errno == EEXIST) {
      return absl::AlreadyExistsError(
          absl::StrCat(path,
                       " already exists; not replacing it (remove it first, or pick "
                       "another name)"));
    }
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", path));
  }
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      int error = errno;
      close(fd);
      return absl::ErrnoToStatus(error, absl::StrCat("cannot write ", path));
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<PkeyPtr> NewKey() {
  PkeyPtr key(EVP_EC_gen("P-256"));
  if (key == nullptr) return OpenSslError("cannot generate an EC P-256 key");
  return key;
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return OpenSslError(absl::StrCat("bad certificate extension ", value));
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return absl::OkStatus();
}

// "DNS:localhost,IP:127.0.0.1" for the names and IPs given.
std::string SubjectAltNames(const std::vector<std::string>& hosts) {
  std::vector<std::string> entries;
  for (const std::string& host : hosts) {
    unsigned char buf[16];
    const bool ip =
        inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
    entries.push_back(absl::StrCat(ip ? "IP:" : "DNS:", host));
  }
  return absl::StrJoin(entries, ",");
}

struct Validity {
  absl::Time not_before, not_after;
};

absl::StatusOr<Validity> ValidityOf(const CertOptions& options) {
  const absl::Time now = absl::Now();
  if (options.not_after.has_value()) {
    const absl::Time end = *options.not_after;
    return Validity{std::min(now, end - absl::Hours(24)) - kClockSkew, end};
  }
  if (options.days < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--days must be at least 1 (got ", options.days,
                                                   "); --not_after=DATE sets the end"));
  }
  return Validity{now - kClockSkew, now + absl::Hours(24) * options.days};
}

// An unsigned certificate for `key`, subject O=dtrain OU=role CN=name, issued by `issuer`
// (null: by itself); the caller adds extensions and signs.
X509Ptr MakeCertificate(EVP_PKEY* key, const std::string& name, const std::string& role,
                        X509* issuer, const Validity& validity) {
  X509Ptr cert(X509_new());
  X509_set_version(cert.get(), 2);  // v3
  unsigned char serial_bytes[16];
  RAND_bytes(serial_bytes, sizeof serial_bytes);
  serial_bytes[0] &= 0x7f;  // positive
  BIGNUM* serial = BN_bin2bn(serial_bytes, sizeof serial_bytes, nullptr);
  BN_to_ASN1_INTEGER(serial, X509_get_serialNumber(cert.get()));
  BN_free(serial);
  ASN1_TIME_set(X509_getm_notBefore(cert.get()), absl::ToTimeT(validity.not_before));
  ASN1_TIME_set(X509_getm_notAfter(cert.get()), absl::ToTimeT(validity.not_after));
  X509_set_pubkey(cert.get(), key);
  X509_NAME* subject = X509_get_subject_name(cert.get());
  auto add = [&](const char* field, const std::string& value) {
    X509_NAME_add_entry_by_txt(subject, field, MBSTRING_UTF8,
                               reinterpret_cast<const unsigned char*>(value.c_str()), -1, -1, 0);
  };
  add("O", "dtrain");
  if (!role.empty()) add("OU", role);
  add("CN", name);
  X509_set_issuer_name(cert.get(), issuer != nullptr ? X509_get_subject_name(issuer) : subject);
  return cert;
}

absl::StatusOr<X509Ptr> MakeLeaf(EVP_PKEY* key, const std::string& name, const std::string& role,
                                 X509* ca, EVP_PKEY* ca_key, const CertOptions& options) {
  ASSIGN_OR_RETURN(Validity validity, ValidityOf(options));
  X509Ptr cert = MakeCertificate(key, name, role, ca, validity);
  std::vector<std::string> sans;
  if (role == kRoleCoordinator) {
    sans = {"localhost", "127.0.0.1", "::1", "coordinator", "dtrain-coordinator"};
  } else if (role == kRoleWorker) {
    sans = {kWorkerPeerHostname};
  }
  if (role == kRoleCoordinator || role == kRoleWorker) {
    sans.insert(sans.end(), options.hosts.begin(), options.hosts.end());
  }
  const bool server = role == kRoleCoordinator || role == kRoleWorker;
  RETURN_IF_ERROR(AddExtension(cert.get(), ca, NID_basic_constraints, "critical,CA:FALSE"));
  RETURN_IF_ERROR(AddExtension(cert.get(), ca, NID_key_usage, "critical,digitalSignature"));
  RETURN_IF_ERROR(AddExtension(cert.get(), ca, NID_ext_key_usage,
                               server ? "serverAuth,clientAuth" : "clientAuth"));
  if (!sans.empty()) {
    RETURN_IF_ERROR(AddExtension(cert.get(), ca, NID_subject_alt_name, SubjectAltNames(sans)));
  }
  RETURN_IF_ERROR(AddExtension(cert.get(), ca, NID_authority_key_identifier, "keyid:always"));
  if (X509_sign(cert.get(), ca_key, EVP_sha256()) == 0) {
    return OpenSslError(absl::StrCat("cannot sign the certificate of ", name));
  }
  return cert;
}

absl::StatusOr<std::string> CertPem(X509* cert) {
  return ToPem([&](BIO* bio) { return PEM_write_bio_X509(bio, cert) == 1; }, "a certificate");
}

absl::StatusOr<std::string> KeyPem(EVP_PKEY* key) {
  return ToPem(
      [&](BIO* bio) {
        return PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
      },
      "a private key");
}

std::string PathOf(const std::string& dir, const std::string& name, const char* ext) {
  return absl::StrCat(dir, "/", name, ext);
}

// Writes DIR/NAME.key (0600) then DIR/NAME.pem (0644); refuses when either exists.
absl::Status WritePair(const std::string& dir, const std::string& name, X509* cert, EVP_PKEY* key,
                       std::vector<std::string>* written) {
  const std::string pem_path = PathOf(dir, name, ".pem");
  const std::string key_path = PathOf(dir, name, ".key");
  for (const std::string& path : {pem_path, key_path}) {
    if (access(path.c_str(), F_OK) == 0) {
      return absl::AlreadyExistsError(absl::StrCat(
          path, " already exists; not replacing it (remove it first, or pick another name)"));
    }
  }
  ASSIGN_OR_RETURN(std::string key_text, KeyPem(key));
  ASSIGN_OR_RETURN(std::string cert_text, CertPem(cert));
  RETURN_IF_ERROR(WriteNewFile(key_path, key_text, 0600));
  RETURN_IF_ERROR(WriteNewFile(pem_path, cert_text, 0644));
  written->push_back(pem_path);
  written->push_back(key_path);
  return absl::OkStatus();
}

absl::Status CheckName(const std::string& name) {
  bool ok = !name.empty() && name[0] != '.';
  for (char c : name) ok = ok && (absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-');
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("certificate name '", name,
                   "' must be letters, digits, '.', '_' or '-' (it names the "
                   "files NAME.pem and NAME.key)"));
}

absl::Status CheckRole(const std::string& role) {
  for (const std::string& known : CertificateRoles()) {
    if (role == known) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown role '", role, "': use one of ",
                                                 absl::StrJoin(CertificateRoles(), ", ")));
}

absl::Status IssueWith(const std::string& dir, const std::string& name, const std::string& role,
                       X509* ca, EVP_PKEY* ca_key, const CertOptions& options,
                       std::vector<std::string>* written) {
  RETURN_IF_ERROR(CheckName(name));
  RETURN_IF_ERROR(CheckRole(role));
  if (name == kCaName) {
    return absl::InvalidArgumentError("the name 'ca' is the CA's own (ca.pem, ca.key)");
  }
  ASSIGN_OR_RETURN(PkeyPtr key, NewKey());
  ASSIGN_OR_RETURN(X509Ptr cert, MakeLeaf(key.get(), name, role, ca, ca_key, options));
  return WritePair(dir, name, cert.get(), key.get(), written);
}

}  // namespace

const std::vector<std::string>& CertificateRoles() {
  static const auto* roles = new std::vector<std::string>{kRoleCoordinator, kRoleWorker, kRoleAdmin,
                                                          kRoleViewer, kRoleUser};
  return *roles;
}

absl::StatusOr<std::vector<std::string>> InitCertificates(const std::string& dir,
                                                          const CertOptions& options) {
  for (const char* ext : {".pem", ".key"}) {
    const std::string path = PathOf(dir, kCaName, ext);
    if (access(path.c_str(), F_OK) == 0) {
      return absl::AlreadyExistsError(
          absl::StrCat(path,
                       " already exists: not replacing the cluster CA (every certificate it signed "
                       "would stop working); `dtrain certs issue ",
                       dir,
                       " NAME --role=ROLE` adds "
                       "certificates to it"));
    }
  }
  RETURN_IF_ERROR(ValidityOf(options).status());
  RETURN_IF_ERROR(MakeDirectories(dir));
  ASSIGN_OR_RETURN(PkeyPtr ca_key, NewKey());
  // The CA outlives its certificates: ten years, or the requested end when later.
  CertOptions ca_options;
  ca_options.days = std::max(options.days, 3650);
  ASSIGN_OR_RETURN(Validity ca_validity, ValidityOf(ca_options));
  X509Ptr ca = MakeCertificate(ca_key.get(), "dtrain cluster CA", "", nullptr, ca_validity);
  RETURN_IF_ERROR(AddExtension(ca.get(), ca.get(), NID_basic_constraints, "critical,CA:TRUE"));
  RETURN_IF_ERROR(AddExtension(ca.get(), ca.get(), NID_key_usage, "critical,keyCertSign,cRLSign"));
  RETURN_IF_ERROR(AddExtension(ca.get(), ca.get(), NID_subject_key_identifier, "hash"));
  if (X509_sign(ca.get(), ca_key.get(), EVP_sha256()) == 0) {
    return OpenSslError("cannot sign the CA certificate");
  }
  std::vector<std::string> written;
  RETURN_IF_ERROR(WritePair(dir, kCaName, ca.get(), ca_key.get(), &written));
  // One certificate per role but user: a user's certificate carries a person's name
  // (`dtrain certs issue DIR alice --role=user`), which the jobs it submits record.
  for (const char* role : {kRoleCoordinator, kRoleWorker, kRoleAdmin, kRoleViewer}) {
    RETURN_IF_ERROR(IssueWith(dir, role, role, ca.get(), ca_key.get(), options, &written));
  }
  return written;
}

absl::StatusOr<std::vector<std::string>> IssueCertificate(const std::string& dir,
                                                          const std::string& name,
                                                          const std::string& role,
                                                          const CertOptions& options) {
  RETURN_IF_ERROR(CheckName(name));
  RETURN_IF_ERROR(CheckRole(role));
  RETURN_IF_ERROR(ValidityOf(options).status());
  ASSIGN_OR_RETURN(std::string ca_pem, ReadFileToString(PathOf(dir, kCaName, ".pem")));
  ASSIGN_OR_RETURN(std::string ca_key_pem, ReadFileToString(PathOf(dir, kCaName, ".key")));
  X509Ptr ca = ParseCertificatePem(ca_pem);
  PkeyPtr ca_key = ParsePrivateKeyPem(ca_key_pem);
  if (ca == nullptr || ca_key == nullptr || X509_check_private_key(ca.get(), ca_key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        dir, "/ca.pem and ", dir, "/ca.key are not a PEM certificate and its private key"));
  }
  std::vector<std::string> written;
  RETURN_IF_ERROR(IssueWith(dir, name, role, ca.get(), ca_key.get(), options, &written));
  return written;
}

absl::StatusOr<absl::Time> ParseCertDate(const std::string& text) {
  absl::Time time;
  std::string error;
  if (absl::ParseTime("%Y-%m-%d", text, absl::UTCTimeZone(), &time, &error) ||
      absl::ParseTime(absl::RFC3339_full, text, &time, &error)) {
    return time;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("bad date '", text, "': use YYYY-MM-DD or 2020-01-01T12:00:00Z"));
}

}  // namespace client
}  // namespace dtrain
