#include "common/tls_probe.h"

#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/x509.h"

namespace dtrain {
namespace {

struct SslCtxDeleter {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
struct SslDeleter {
  void operator()(SSL* s) const { SSL_free(s); }
};

// "host:port", "[::1]:port" -> host, port; false when there is no port.
bool SplitAddress(const std::string& address, std::string* host, std::string* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  return !port->empty();
}

// A connected TCP socket with send and receive timeouts, or -1.
int Dial(const std::string& host, const std::string& port, absl::Duration timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) return -1;
  int fd = -1;
  timeval tv = absl::ToTimeval(timeout);
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);  // also bounds connect(2)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  return fd;
}

// OpenSSL's reason for the last error ("sslv3 alert certificate expired"), queue cleared.
std::string LastReason() {
  std::string reason;
  while (unsigned long e = ERR_get_error()) {
    const char* r = ERR_reason_error_string(e);
    if (r != nullptr && reason.empty()) reason = r;
  }
  return reason;
}

// Whether `cert` verifies against the CA file `ca`; the error when not.
std::string VerifyAgainst(X509* cert, const std::string& ca) {
  X509_STORE* store = X509_STORE_new();
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  std::string error;
  if (X509_STORE_load_file(store, ca.c_str()) != 1 ||
      X509_STORE_CTX_init(ctx, store, cert, nullptr) != 1) {
    error = "cannot read the CA";
  } else if (X509_verify_cert(ctx) != 1) {
    error = X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx));
  }
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  ERR_clear_error();
  return error;
}

// Why the server refused our certificate: from the certificate itself when it tells (expired,
// not signed by our own --tls_ca), else the server does not trust our CA. `alert`: the TLS
// alert it sent, if any (gRPC's server mostly just closes the connection).
std::string RefusedOurs(const TlsFiles& tls, const std::string& alert) {
  X509Ptr ours;
  if (absl::StatusOr<std::string> pem = ReadFileToString(tls.cert); pem.ok()) {
    ours = ParseCertificatePem(*pem);
  }
  std::string what = "our certificate " + tls.cert;
  if (absl::StatusOr<std::string> d = DescribeCertificateFile(tls.cert); d.ok()) {
    absl::StrAppend(&what, " (", d->substr(0, d->find(',')), ")");
  }
  std::string why;
  if (ours == nullptr) {
    why = "it could not be read back";
  } else if (X509_cmp_current_time(X509_get0_notAfter(ours.get())) < 0) {
    why = absl::StrCat("it expired on ", FormatAsn1Time(X509_get0_notAfter(ours.get())));
  } else if (X509_cmp_current_time(X509_get0_notBefore(ours.get())) > 0) {
    why = absl::StrCat("it is not valid before ", FormatAsn1Time(X509_get0_notBefore(ours.get())));
  } else if (std::string error = VerifyAgainst(ours.get(), tls.ca); !error.empty()) {
    why = absl::StrCat("it is not signed by the cluster CA --tls_ca ", tls.ca, " (", error,
                       "): another cluster's certificate?");
  } else {
    why = "the coordinator does not trust its CA (--tls_ca is not the coordinator's CA?)";
  }
  return absl::StrCat("the coordinator refused ", what, ": ", why, " (",
                      alert.empty() ? "it closed the connection" : "TLS alert: " + alert, ")");
}

}  // namespace

bool AcceptsConnections(const std::string& address, absl::Duration timeout) {
  std::string host, port;
  if (!SplitAddress(address, &host, &port)) return false;
  const int fd = Dial(host, port, timeout);
  if (fd < 0) return false;
  close(fd);
  return true;
}

std::string NoAnswerWithin(const std::string& address, absl::Duration timeout) {
  return absl::StrCat("connected to the coordinator at ", address, " but no answer within ",
                      absl::FormatDuration(timeout), " (--timeout): is it hung or overloaded?");
}

std::string DiagnoseTlsFailure(const std::string& address, const TlsFiles& tls,
                               absl::Duration timeout) {
  if (!ValidateTlsFiles(tls, "dtrain").ok()) return "";
  std::string host, port;
  if (!SplitAddress(address, &host, &port)) return "";
  const int fd = Dial(host, port, std::min(timeout, absl::Seconds(3)));
  if (fd < 0) return "";  // not a TLS problem: nothing listens there
  std::unique_ptr<SSL_CTX, SslCtxDeleter> ctx(SSL_CTX_new(TLS_client_method()));
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);  // verified below, to say why
  if (tls.enabled()) {
    if (SSL_CTX_load_verify_locations(ctx.get(), tls.ca.c_str(), nullptr) != 1 ||
        SSL_CTX_use_certificate_chain_file(ctx.get(), tls.cert.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx.get(), tls.key.c_str(), SSL_FILETYPE_PEM) != 1) {
      ERR_clear_error();
      close(fd);
      return "";
    }
  }
  std::unique_ptr<SSL, SslDeleter> ssl(SSL_new(ctx.get()));
  static const unsigned char kAlpn[] = {2, 'h', '2'};
  SSL_set_alpn_protos(ssl.get(), kAlpn, sizeof kAlpn);
  SSL_set_fd(ssl.get(), fd);
  const int connected = SSL_connect(ssl.get());
  // Nothing came back within the timeout (not even a close): a hung or paused process, not a
  // plaintext one (that answers a ClientHello at once, with bytes or a close).
  const bool no_answer = connected != 1 &&
                         SSL_get_error(ssl.get(), connected) == SSL_ERROR_SYSCALL &&
                         (errno == EAGAIN || errno == EWOULDBLOCK);
  std::string reason = connected == 1 ? "" : LastReason();
  X509Ptr theirs(SSL_get1_peer_certificate(ssl.get()));
  std::string result;
  if (no_answer) {
    result = NoAnswerWithin(address, std::min(timeout, absl::Seconds(3)));
  } else if (tls.insecure) {
    // Anything TLS came back (a certificate, an alert): the server speaks TLS.
    if (theirs != nullptr || absl::StrContains(reason, "alert")) {
      result = absl::StrCat("the coordinator at ", address,
                            " requires mutual TLS and this "
                            "client is plaintext (--insecure or DTRAIN_INSECURE=1): pass "
                            "--tls_ca, --tls_cert and --tls_key");
    }
  } else if (connected != 1 && theirs == nullptr && !absl::StrContains(reason, "alert")) {
    result = absl::StrCat("the coordinator at ", address, " does not speak TLS (",
                          reason.empty() ? "no handshake" : reason,
                          "): was it started with --insecure? Then pass --insecure too");
  } else if (theirs != nullptr && SSL_get_verify_result(ssl.get()) != X509_V_OK) {
    result = absl::StrCat("the coordinator's certificate does not verify against --tls_ca ", tls.ca,
                          ": ", X509_verify_cert_error_string(SSL_get_verify_result(ssl.get())),
                          " (is --tls_ca this cluster's CA?)");
  } else if (theirs != nullptr && X509_check_host(theirs.get(), host.c_str(), 0, 0, nullptr) != 1 &&
             X509_check_ip_asc(theirs.get(), host.c_str(), 0) != 1) {
    result = absl::StrCat("the coordinator's certificate is not for '", host,
                          "' (make one with `dtrain certs issue DIR coordinator2 "
                          "--role=coordinator --host=",
                          host, "`)");
  } else if (connected != 1) {
    result = RefusedOurs(tls, reason);
  } else {
    // TLS 1.3: the server judges our certificate after our side finished; its alert (or its
    // first HTTP/2 frame, when it accepted us) comes next.
    // gRPC's server closes without an alert; one that accepted us sends HTTP/2 SETTINGS.
    char byte;
    if (SSL_read(ssl.get(), &byte, 1) <= 0) {
      reason = LastReason();
      if (absl::StrContains(reason, "alert")) {
        result = RefusedOurs(tls, reason);
      } else if (absl::StrContains(reason, "unexpected eof")) {
        result = RefusedOurs(tls, "");
      }
    }
  }
  ERR_clear_error();
  close(fd);
  return result;
}

}  // namespace dtrain
