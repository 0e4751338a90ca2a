#include "common/metrics/http_exporter.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "CivetServer.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "civetweb.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"

// Debian's civetweb gives each of its threads a fixed 100 KiB stack (built with
// USE_STACK_SIZE=102400), and the Exposer has no option to change it. glibc carves a process's
// static TLS out of every thread's stack, and a worker linked with cuBLAS and OpenBLAS has about
// 170 KiB of it, so civetweb's pthread_create fails with EINVAL and the Exposer throws ("null
// context when constructing CivetServer"). The executable's definition of
// pthread_attr_setstacksize interposes libc's for every shared library (libcivetweb, loaded by
// libprometheus-cpp-pull, included); it raises requests below 1 MiB to 1 MiB, which fits any
// TLS we link, and forwards the rest. exposer_tls_test proves it with 512 KiB of TLS.
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

// The registry as the Exposer's Collectable (it takes a weak_ptr; the registry is the caller's).
// Each collect's time goes to `collect_seconds` (when not null), seen from the next scrape on.
class Page final : public prometheus::Collectable {
 public:
  Page(Registry* registry, Histogram* collect_seconds)
      : registry_(registry), collect_seconds_(collect_seconds) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    const absl::Time start = absl::Now();
    std::vector<prometheus::MetricFamily> page = registry_->Collect();
    if (collect_seconds_ != nullptr) {
      collect_seconds_->Observe(absl::ToDoubleSeconds(absl::Now() - start));
    }
    return page;
  }

 private:
  Registry* const registry_;
  Histogram* const collect_seconds_;
};

// GET /healthz: "ok", answered by civetweb's begin_request hook before the Exposer's handlers
// (which serve only collectables, each page prefixed with the Exposer's own exposer_* series).
// Exactly /healthz: other paths go on to the Exposer (404 unless /metrics).
int AnswerHealthz(mg_connection* connection) {
  const mg_request_info* request = mg_get_request_info(connection);
  if (request == nullptr || request->local_uri == nullptr ||
      std::string_view(request->local_uri) != "/healthz") {
    return 0;
  }
  static constexpr char kAnswer[] =
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 3\r\n"
      "Cache-Control: no-store\r\nConnection: close\r\n\r\nok\n";
  mg_write(connection, kAnswer, sizeof(kAnswer) - 1);
  return 200;
}

const CivetCallbacks* HealthzCallbacks() {
  static const CivetCallbacks* callbacks = [] {
    auto* c = new CivetCallbacks();
    c->begin_request = AnswerHealthz;
    return c;
  }();
  return callbacks;
}

}  // namespace

MetricsServer::MetricsServer(std::string listen) : listen_(std::move(listen)) {}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& listen,
                                                                    Registry* registry) {
  absl::StatusOr<std::string> ports = CivetwebPorts(listen);
  if (!ports.ok()) return ports.status();
  std::unique_ptr<MetricsServer> server(new MetricsServer(listen));
  // prometheus-cpp reports a failed civetweb start (the only thing it throws for here) as an
  // exception; this is the one place it is caught.
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(
        std::vector<std::string>{"listening_ports", *ports, "num_threads", "2",
                                 "request_timeout_ms", "10000"},
        HealthzCallbacks());
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on ", listen, ": ", e.what(),
        " (address in use, not a numeric IPv4 address of this machine, or not permitted)"));
  }
  const std::vector<int> bound = server->exposer_->GetListeningPorts();
  if (bound.empty()) {
    return absl::InternalError(absl::StrCat("metrics server on ", listen, ": no bound port"));
  }
  server->port_ = bound[0];
  // The scrape's own cost with its unit in the name (the Exposer's exposer_request_latencies is
  // a summary in microseconds). A second server on the same registry shares the first's.
  const Buckets buckets = ExponentialBuckets(0.0005, 2, 14);  // 0.5 ms .. 4.1 s
  absl::StatusOr<Family<Histogram>*> collect = registry->AddHistogram(
      "dtrain_metrics_scrape_duration_seconds",
      "Time to collect this process's metrics for one /metrics scrape (every family and "
      "collect hook), in seconds.",
      {}, buckets);
  server->page_ =
      std::make_shared<Page>(registry, collect.ok() ? &(*collect)->Add({}, buckets) : nullptr);
  server->exposer_->RegisterCollectable(server->page_, "/metrics");
  return server;
}

MetricsServer::~MetricsServer() { Stop(); }

void MetricsServer::Stop() {
  if (exposer_ == nullptr) return;
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
  exposer_.reset();
  stopped = true;
  waker.join();
}

}  // namespace dtrain::metrics
