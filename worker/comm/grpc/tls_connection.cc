// DataPsk, DataConnection, ConnectData and DataListener of grpc/tls_link.h: the TLS 1.3 PSK
// connections themselves (OpenSSL set-up, handshakes, blocking reads and writes with stop
// conditions). TlsSender and TlsReceiver, which stripe frames over them, are in tls_link.cc.
#include "worker/comm/grpc/tls_link.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "worker/comm/grpc/frame_codec.h"

namespace dtrain::comm {
namespace {

// TLS_AES_128_GCM_SHA256 (RFC 8446 B.4): its hash is SHA-256, the PSK's 32 bytes.
constexpr unsigned char kSuiteId[] = {0x13, 0x01};
constexpr char kSuiteName[] = "TLS_AES_128_GCM_SHA256";
constexpr uint32_t kPreambleMagic = 0x31445444;  // "DTD1"
// How often a blocked read or write looks at its stop conditions.
constexpr int kPollMs = 100;
constexpr absl::Duration kHandshakeTimeout = absl::Seconds(5);
// Encrypted records are read and written through buffers of this size (AttachSocket).
constexpr int kSocketBufferBytes = 256 << 10;

// Sent first on every connection, inside TLS.
struct Preamble {
  uint32_t magic;
  uint32_t index;  // of count
  uint32_t count;
};

std::string SslErrors() {
  std::string text;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    absl::StrAppend(&text, text.empty() ? "" : "; ", buf);
  }
  return text.empty() ? std::string(strerror(errno)) : text;
}

// The socket's blocking calls return every kPollMs (EAGAIN), so waits can look at their
// conditions; no Nagle delay for the small frames of collectives.
void TuneSocket(int fd) {
  timeval tv{0, kPollMs * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// OpenSSL writes with write(2): a connection the peer reset must fail the write, not kill the
// process.
void IgnoreSigpipe() {
  static std::once_flag once;
  std::call_once(once, [] { signal(SIGPIPE, SIG_IGN); });
}

void RestrictToPskTls13(SSL_CTX* ctx) {
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_ciphersuites(ctx, kSuiteName);
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // No read-ahead: OpenSSL 3.0 moves the bytes it read ahead to the front of its buffer before
  // each record (ssl3_read_n's payload alignment), so a 256 KiB read-ahead copied every byte
  // about eight times. The socket's buffer BIO (AttachSocket) reads as much per recv(2).
}

// The socket under `ssl`, through a BIO_f_buffer of kSocketBufferBytes each way: a frame's
// 16 KiB records leave in a few large send(2) calls instead of one each (DataConnection::Write
// flushes it at the end of a frame), and arrive in large recv(2) calls from which OpenSSL takes
// each record's header and body. A connection is written by one thread at a time and read by
// one (never both at once), as an SSL requires anyway. The socket stays the caller's to close
// (BIO_NOCLOSE). False when OpenSSL cannot make the BIOs.
bool AttachSocket(SSL* ssl, int fd) {
  BIO* socket = BIO_new_socket(fd, BIO_NOCLOSE);
  BIO* buffer = BIO_new(BIO_f_buffer());
  if (socket == nullptr || buffer == nullptr ||
      BIO_set_read_buffer_size(buffer, kSocketBufferBytes) <= 0 ||
      BIO_set_write_buffer_size(buffer, kSocketBufferBytes) <= 0) {
    BIO_free(buffer);
    BIO_free(socket);
    return false;
  }
  BIO_push(buffer, socket);
  SSL_set_bio(ssl, buffer, buffer);  // one reference for both; SSL_free frees the chain
  return true;
}

// A session of `ctx` over `fd` (AttachSocket); closes `fd` when it cannot be made.
absl::StatusOr<SSL*> NewSsl(SSL_CTX* ctx, int fd) {
  SSL* ssl = SSL_new(ctx);
  if (ssl == nullptr) {
    close(fd);
    return absl::InternalError(absl::StrCat("SSL_new: ", SslErrors()));
  }
  if (!AttachSocket(ssl, fd)) {
    SSL_free(ssl);
    close(fd);
    return absl::InternalError(absl::StrCat("data connection BIOs: ", SslErrors()));
  }
  return ssl;
}

SSL_SESSION* PskSession(SSL* ssl, const std::string& key) {
  const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, kSuiteId);
  if (cipher == nullptr) return nullptr;
  SSL_SESSION* session = SSL_SESSION_new();
  if (session == nullptr ||
      !SSL_SESSION_set1_master_key(session, reinterpret_cast<const unsigned char*>(key.data()),
                                   key.size()) ||
      !SSL_SESSION_set_cipher(session, cipher) ||
      !SSL_SESSION_set_protocol_version(session, TLS1_3_VERSION)) {
    SSL_SESSION_free(session);
    return nullptr;
  }
  return session;
}

// Client: the PSK this connection presents (SSL app data: the DataPsk).
int UsePsk(SSL* ssl, const EVP_MD* /*md*/, const unsigned char** id, size_t* id_len,
           SSL_SESSION** session) {
  const auto* psk = static_cast<const DataPsk*>(SSL_get_app_data(ssl));
  if (psk == nullptr) return 0;
  *session = PskSession(ssl, psk->key);
  if (*session == nullptr) return 0;
  *id = reinterpret_cast<const unsigned char*>(psk->identity.data());
  *id_len = psk->identity.size();
  return 1;
}

// Server: the key of a registered identity, else the handshake fails (no certificate to fall
// back on). SSL app data: where the identity's receiver goes.
int FindPsk(SSL* ssl, const unsigned char* id, size_t id_len, SSL_SESSION** session) {
  auto* listener = static_cast<DataListener*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl)));
  const std::string identity(reinterpret_cast<const char*>(id), id_len);
  std::string key;
  auto* found = static_cast<DataListener::Found*>(SSL_get_app_data(ssl));
  if (listener == nullptr || !listener->Find(identity, &key, &found->receiver)) return 0;
  found->identity = identity;
  *session = PskSession(ssl, key);
  return *session == nullptr ? 0 : 1;
}

SSL_CTX* ClientContext() {
  static SSL_CTX* ctx = [] {
    SSL_CTX* c = SSL_CTX_new(TLS_client_method());
    RestrictToPskTls13(c);
    SSL_CTX_set_verify(c, SSL_VERIFY_NONE, nullptr);  // the PSK authenticates the server
    SSL_CTX_set_psk_use_session_callback(c, UsePsk);
    return c;
  }();
  return ctx;
}

// Runs an SSL handshake step until done, failed or `deadline`.
absl::Status Handshake(SSL* ssl, int (*step)(SSL*), absl::Time deadline) {
  while (true) {
    ERR_clear_error();
    const int r = step(ssl);
    if (r == 1) return absl::OkStatus();
    const int e = SSL_get_error(ssl, r);
    if ((e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) && absl::Now() < deadline) {
      continue;
    }
    return absl::UnavailableError(absl::StrCat("TLS handshake failed: ", SslErrors()));
  }
}

// "[::1]" -> "::1"; "" and "[::]" -> any.
std::string BareHost(std::string host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

absl::StatusOr<int> Dial(const std::string& host, int port, absl::Time deadline) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string bare = BareHost(host);
  if (int e = getaddrinfo(bare.c_str(), std::to_string(port).c_str(), &hints, &found); e != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve '", host, "': ", gai_strerror(e)));
  }
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int r = fd < 0 ? -1 : connect(fd, found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", strerror(errno)));
  if (r != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    const int64_t ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
    int err = ETIMEDOUT;
    socklen_t len = sizeof(err);
    if (poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 1 << 30))) == 1) {
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    r = err == 0 ? 0 : -1;
    errno = err;
  }
  if (r != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot connect to ", host, ":", port, ": ", strerror(err)));
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  TuneSocket(fd);
  return fd;
}

}  // namespace

absl::StatusOr<DataPsk> DataPsk::New() {
  DataPsk psk;
  psk.identity.resize(16);
  psk.key.resize(32);
  if (RAND_bytes(reinterpret_cast<unsigned char*>(psk.identity.data()), psk.identity.size()) != 1 ||
      RAND_bytes(reinterpret_cast<unsigned char*>(psk.key.data()), psk.key.size()) != 1) {
    return absl::InternalError("OpenSSL's random generator failed");
  }
  return psk;
}

// --- DataConnection ---

DataConnection::~DataConnection() {
  SSL_free(ssl_);
  close(fd_);
}

namespace {

// Moves n bytes through `io(offset, &moved)` (one SSL_write_ex or SSL_read_ex call), calling
// `check` whenever the socket would block. The SSL error that stopped it (SSL_ERROR_NONE once all
// n moved), with `*done` the bytes moved; or check()'s error.
template <typename Io>
absl::StatusOr<int> MoveBytes(SSL* ssl, size_t n, const Io& io,
                              const std::function<absl::Status()>& check, size_t* done) {
  *done = 0;
  while (*done < n) {
    ERR_clear_error();
    size_t moved = 0;
    const int r = io(*done, &moved);
    if (r == 1) {
      *done += moved;
      continue;
    }
    const int e = SSL_get_error(ssl, r);
    if (e != SSL_ERROR_WANT_WRITE && e != SSL_ERROR_WANT_READ) return e;
    RETURN_IF_ERROR(check());
  }
  return SSL_ERROR_NONE;
}

constexpr absl::string_view kBroke =
    "its data connection broke (the peer died or the network failed): ";

}  // namespace

absl::Status DataConnection::Write(const void* data, size_t n,
                                   const std::function<absl::Status()>& check, bool more) {
  const auto* p = static_cast<const char*>(data);
  size_t done = 0;
  const auto write = [&](size_t at, size_t* moved) {
    return SSL_write_ex(ssl_, p + at, n - at, moved);
  };
  ASSIGN_OR_RETURN(const int e, MoveBytes(ssl_, n, write, check, &done));
  if (e != SSL_ERROR_NONE) return absl::UnavailableError(absl::StrCat(kBroke, SslErrors()));
  return more ? absl::OkStatus() : Flush(check);
}

absl::Status DataConnection::Flush(const std::function<absl::Status()>& check) {
  BIO* buffer = SSL_get_wbio(ssl_);
  while (true) {
    ERR_clear_error();
    if (BIO_flush(buffer) > 0) return absl::OkStatus();
    if (!BIO_should_retry(buffer)) {
      return absl::UnavailableError(absl::StrCat(kBroke, SslErrors()));
    }
    RETURN_IF_ERROR(check());
  }
}

absl::Status DataConnection::Read(void* data, size_t n,
                                  const std::function<absl::Status()>& check) {
  auto* p = static_cast<char*>(data);
  size_t done = 0;
  const auto read = [&](size_t at, size_t* moved) {
    return SSL_read_ex(ssl_, p + at, n - at, moved);
  };
  ASSIGN_OR_RETURN(const int e, MoveBytes(ssl_, n, read, check, &done));
  if (e == SSL_ERROR_NONE) return absl::OkStatus();
  if (e == SSL_ERROR_ZERO_RETURN && done == 0) {
    return absl::OutOfRangeError("the peer closed the data connection");
  }
  return absl::UnavailableError(
      absl::StrCat(kBroke, e == SSL_ERROR_ZERO_RETURN ? "closed inside a frame" : SslErrors()));
}

bool DataConnection::Close(absl::Time deadline) {
  const auto until_deadline = [deadline] {
    return absl::Now() < deadline ? absl::OkStatus() : absl::DeadlineExceededError("");
  };
  ERR_clear_error();
  // The close_notify may wait in the write buffer when the socket was full.
  if (SSL_shutdown(ssl_) < 0 || !Flush(until_deadline).ok()) return false;
  char byte;
  return absl::IsOutOfRange(Read(&byte, 1, until_deadline));
}

void DataConnection::AnswerClose() {
  ERR_clear_error();
  SSL_shutdown(ssl_);
  BIO_flush(SSL_get_wbio(ssl_));  // best effort, as OpenSSL's own after an alert
}

void DataConnection::Abort() { ::shutdown(fd_, SHUT_RDWR); }

absl::StatusOr<std::vector<std::unique_ptr<DataConnection>>> ConnectData(
    const std::string& host, int port, const DataPsk& psk, int count, absl::Time deadline) {
  IgnoreSigpipe();
  std::vector<std::unique_ptr<DataConnection>> connections;
  for (int i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(int fd, Dial(host, port, deadline));
    ASSIGN_OR_RETURN(SSL * ssl, NewSsl(ClientContext(), fd));
    SSL_set_app_data(ssl, const_cast<DataPsk*>(&psk));
    auto connection = std::make_unique<DataConnection>(fd, ssl);
    absl::Status s = Handshake(ssl, SSL_connect, deadline);
    SSL_set_app_data(ssl, nullptr);
    if (!s.ok()) {
      return absl::UnavailableError(absl::StrCat("data connection ", i, " to ", host, ":", port,
                                                 " (the peer refused the key?): ", s.message()));
    }
    const Preamble preamble{kPreambleMagic, static_cast<uint32_t>(i), static_cast<uint32_t>(count)};
    RETURN_IF_ERROR(connection->Write(&preamble, sizeof(preamble), [deadline] {
      return absl::Now() < deadline ? absl::OkStatus()
                                    : absl::DeadlineExceededError("writing the preamble");
    }));
    connections.push_back(std::move(connection));
  }
  return connections;
}

// --- DataListener ---

DataListener::DataListener(int fd, int port) : fd_(fd), port_(port) {}

absl::StatusOr<std::unique_ptr<DataListener>> DataListener::Start(const std::string& host,
                                                                  int port) {
  IgnoreSigpipe();
  std::string bare = BareHost(host);
  if (bare.empty()) bare = "::";
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST;
  addrinfo* found = nullptr;
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("data listener: port ", port, " out of range"));
  }
  if (int e = getaddrinfo(bare.c_str(), std::to_string(port).c_str(), &hints, &found); e != 0) {
    return absl::UnavailableError(
        absl::StrCat("data listener: bad host '", host, "': ", gai_strerror(e)));
  }
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int zero = 0, one = 1;
  if (fd >= 0 && found->ai_family == AF_INET6) {
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));  // IPv4 peers too
  }
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool bound =
      fd >= 0 && bind(fd, found->ai_addr, found->ai_addrlen) == 0 && listen(fd, 64) == 0;
  freeaddrinfo(found);
  if (!bound) {
    const int err = errno;
    if (fd >= 0) close(fd);
    return absl::UnavailableError(absl::StrCat("data listener: cannot listen on ", host, " port ",
                                               port, port == 0 ? "" : " (--data_port)", ": ",
                                               strerror(err)));
  }
  sockaddr_storage address{};
  socklen_t len = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &len);
  const int bound_port =
      ntohs(address.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&address)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  std::unique_ptr<DataListener> listener(new DataListener(fd, bound_port));
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  RestrictToPskTls13(ctx);
  SSL_CTX_set_app_data(ctx, listener.get());
  SSL_CTX_set_psk_find_session_callback(ctx, FindPsk);
  listener->ctx_ = ctx;
  listener->thread_ = std::thread([l = listener.get()] { l->Run(); });
  return listener;
}

DataListener::~DataListener() {
  Stop();
  SSL_CTX_free(static_cast<SSL_CTX*>(ctx_));
  close(fd_);
}

void DataListener::Register(const DataPsk& psk, std::shared_ptr<TlsReceiver> receiver,
                            int connections) {
  absl::MutexLock lock(&mu_);
  psks_[psk.identity] = Entry{psk.key, std::move(receiver), connections};
}

void DataListener::Unregister(const std::string& identity) {
  absl::MutexLock lock(&mu_);
  psks_.erase(identity);
}

void DataListener::set_on_refused(std::function<void(const absl::Status&)> on_refused) {
  absl::MutexLock lock(&mu_);
  on_refused_ = std::move(on_refused);
}

bool DataListener::Find(const std::string& identity, std::string* key,
                        std::shared_ptr<TlsReceiver>* receiver) {
  absl::MutexLock lock(&mu_);
  auto it = psks_.find(identity);
  if (it == psks_.end()) return false;
  *key = it->second.key;
  *receiver = it->second.receiver;
  return true;
}

void DataListener::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  psks_.clear();
}

void DataListener::Run() {
  while (!stop_.load()) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, kPollMs) != 1) continue;
    const int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    absl::Status admitted = Accept(fd);
    if (!admitted.ok()) {
      std::function<void(const absl::Status&)> on_refused;
      {
        absl::MutexLock lock(&mu_);
        on_refused = on_refused_;
      }
      if (on_refused) on_refused(admitted);
    }
  }
}

absl::Status DataListener::Accept(int fd) {
  TuneSocket(fd);
  ASSIGN_OR_RETURN(SSL * ssl, NewSsl(static_cast<SSL_CTX*>(ctx_), fd));
  Found found;  // set by the handshake (FindPsk)
  SSL_set_app_data(ssl, &found);
  auto connection = std::make_unique<DataConnection>(fd, ssl);
  const absl::Time deadline = absl::Now() + kHandshakeTimeout;
  absl::Status handshake = Handshake(ssl, SSL_accept, deadline);
  SSL_set_app_data(ssl, nullptr);
  if (!handshake.ok()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "refused a data connection (no key of this job's peers): ", handshake.message()));
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = psks_.find(found.identity);  // gone if withdrawn meanwhile: it was admitted before
    if (it != psks_.end() && --it->second.left <= 0) psks_.erase(it);  // a key admits K, no more
  }
  Preamble preamble{};
  absl::Status read = connection->Read(&preamble, sizeof(preamble), [deadline] {
    return absl::Now() < deadline ? absl::OkStatus()
                                  : absl::DeadlineExceededError("no preamble in time");
  });
  if (!read.ok()) return read;
  if (preamble.magic != kPreambleMagic) {
    return absl::InvalidArgumentError("a data connection without dtrain's preamble");
  }
  return found.receiver->Add(std::move(connection), preamble.index, preamble.count);
}

}  // namespace dtrain::comm
