#include "common/metrics/http_exporter.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <dlfcn.h>
#include <pthread.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/metrics/text_format.h"

// Debian's civetweb gives each of its threads a fixed 100 KiB stack (built with
// USE_STACK_SIZE=102400). glibc carves a process's static TLS out of every thread's stack, and a
// worker linked with cuBLAS and OpenBLAS has about 170 KiB of it, so civetweb's pthread_create
// fails with EINVAL ("Cannot create first worker thread"). The executable's definition of
// pthread_attr_setstacksize interposes libc's for every shared library (civetweb included); it
// raises requests below 1 MiB to 1 MiB, which fits any TLS we link, and forwards the rest.
extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) noexcept {
  using SetStackSize = int (*)(pthread_attr_t*, size_t);
  static const SetStackSize libc_set_stack_size =
      reinterpret_cast<SetStackSize>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  constexpr size_t kMinStack = size_t{1} << 20;
  return libc_set_stack_size(attr, std::max(size, kMinStack));
}

namespace dtrain::metrics {
namespace {

// civetweb's listening_ports value for `listen`: "IP:PORT" or "PORT" (every interface).
absl::StatusOr<std::string> CivetwebPorts(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? "" : listen.substr(0, colon);
  const std::string port = colon == std::string::npos ? listen : listen.substr(colon + 1);
  int number = -1;
  if (port.empty() || !absl::SimpleAtoi(port, &number) || number < 0 || number > 65535 ||
      port.find_first_not_of("0123456789") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address \"", listen,
                     "\": expected HOST:PORT, :PORT or PORT with PORT in 0..65535"));
  }
  if (host == "localhost") host = "127.0.0.1";
  if (host.empty() || host == "*") return absl::StrCat(number);
  return absl::StrCat(host, ":", number);
}

// A whole response; `head` leaves the body out (HEAD requests).
int Respond(mg_connection* conn, int code, const char* content_type, const std::string& body,
            bool head, const char* extra_headers = "") {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\n%sConnection: close\r\n\r\n",
            code, mg_get_response_code_text(conn, code), content_type, body.size(), extra_headers);
  if (!head) mg_write(conn, body.data(), body.size());
  return code;
}

// GET and HEAD only: true with *head set, or false after answering 405.
bool AcceptMethod(mg_connection* conn, bool* head) {
  const char* method = mg_get_request_info(conn)->request_method;
  *head = std::strcmp(method, "HEAD") == 0;
  if (*head || std::strcmp(method, "GET") == 0) return true;
  Respond(conn, 405, "text/plain; charset=utf-8", "only GET and HEAD\n", false,
          "Allow: GET, HEAD\r\n");
  return false;
}

int HandleMetrics(mg_connection* conn, void* registry) {
  bool head = false;
  if (!AcceptMethod(conn, &head)) return 405;
  const std::string text = static_cast<Registry*>(registry)->SerializeText();
  return Respond(conn, 200, kTextContentType, text, head);
}

int HandleHealth(mg_connection* conn, void* /*self*/) {
  bool head = false;
  if (!AcceptMethod(conn, &head)) return 405;
  return Respond(conn, 200, "text/plain; charset=utf-8", "ok\n", head);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& listen,
                                                                    Registry* registry) {
  absl::StatusOr<std::string> ports = CivetwebPorts(listen);
  if (!ports.ok()) return ports.status();
  static std::once_flag init;
  std::call_once(init, [] { mg_init_library(0); });

  std::unique_ptr<MetricsServer> server(new MetricsServer(listen));
  const char* options[] = {"listening_ports",    ports->c_str(), "num_threads", "2",
                           "request_timeout_ms", "10000",        nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  mg_init_data init_data;
  init_data.callbacks = &callbacks;
  init_data.user_data = server.get();
  init_data.configuration_options = options;
  char error_text[256] = {0};
  unsigned error_code = 0;
  mg_error_data error;
  error.code = &error_code;
  error.text = error_text;
  error.text_buffer_size = sizeof(error_text);
  server->context_ = mg_start2(&init_data, &error);
  if (server->context_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on ", listen, ": ",
        error_text[0] != 0 ? error_text : "mg_start failed",
        " (address in use, not a numeric IPv4 address of this machine, or not permitted)"));
  }
  mg_server_port bound[4];
  const int n = mg_get_server_ports(server->context_, 4, bound);
  if (n < 1) {
    return absl::InternalError(absl::StrCat("metrics server on ", listen, ": no bound port"));
  }
  server->port_ = bound[0].port;
  // "$": exactly these paths, not /metrics/anything.
  mg_set_request_handler(server->context_, "/metrics$", &HandleMetrics, registry);
  mg_set_request_handler(server->context_, "/healthz$", &HandleHealth, nullptr);
  return server;
}

MetricsServer::~MetricsServer() { Stop(); }

void MetricsServer::Stop() {
  if (context_ == nullptr) return;
  // civetweb's accept loop polls with a 2s timeout before it sees the stop flag; connections to
  // our own port wake it, so Stop takes milliseconds, not up to 2 seconds.
  std::atomic<bool> stopped{false};
  std::thread waker([this, &stopped] {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port_));
    const size_t colon = listen_.rfind(':');
    const std::string host = colon == std::string::npos ? "" : listen_.substr(0, colon);
    if (inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1 ||
        address.sin_addr.s_addr == htonl(INADDR_ANY)) {
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    }
    while (!stopped.load()) {
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd >= 0) {
        connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
        close(fd);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  mg_stop(context_);
  stopped = true;
  waker.join();
  context_ = nullptr;
}

}  // namespace dtrain::metrics
