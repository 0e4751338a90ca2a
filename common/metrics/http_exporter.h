// MetricsServer: a Registry served over HTTP by prometheus-cpp's Exposer (civetweb, Debian's
// libcivetweb underneath), for Prometheus to scrape and for liveness probes:
//   GET /metrics   200, the Exposer's own exposer_* series (scrapes, bytes, latency) then the
//                  registry's page (Registry::Collect); gzip when the client accepts it
//   GET /healthz   200 "ok\n" (text/plain): the process serves HTTP; no metrics text
// civetweb matches /metrics as a prefix (/metricsx is /metrics); /healthz is exact; other paths
// are 404. Each
// scrape runs the registry's collect hooks on one of the Exposer's two threads. This file exists
// for three things the Exposer leaves to its user: an absl::Status instead of its exception when it
// cannot listen, an address check naming the flag's value, and thread stacks that fit a process's
// static TLS (see http_exporter.cc).
//
//   ASSIGN_OR_RETURN(std::unique_ptr<metrics::MetricsServer> server,
//                    metrics::MetricsServer::Start("0.0.0.0:9464", &registry));
//   ... server->port() ...                    // the bound port, useful with "127.0.0.1:0"
//   server.reset();                           // stops: waits for requests in progress
#ifndef DTRAIN_COMMON_METRICS_HTTP_EXPORTER_H_
#define DTRAIN_COMMON_METRICS_HTTP_EXPORTER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/metrics/registry.h"

namespace prometheus {
class Collectable;
class Exposer;
}  // namespace prometheus

namespace dtrain::metrics {

class MetricsServer {
 public:
  // Listens on `listen` and serves `registry` (which must outlive the server). `listen` is
  // "HOST:PORT" with a numeric IPv4 HOST ("0.0.0.0:9464", "127.0.0.1:0") or "localhost", or
  // ":PORT" / "PORT" for every interface; port 0 picks a free port. (Debian's civetweb is built
  // without IPv6.) InvalidArgument for a malformed address; Unavailable "cannot serve metrics on
  // ADDRESS: ..." when it cannot listen (in use, not this machine's address).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& listen,
                                                              Registry* registry);
  ~MetricsServer();  // Stop()
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Closes the port and waits for requests in progress. Idempotent.
  void Stop();

  int port() const { return port_; }
  const std::string& listen() const { return listen_; }

 private:
  explicit MetricsServer(std::string listen);
  const std::string listen_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Collectable> page_;  // the registry, for /metrics
  int port_ = 0;
};

}  // namespace dtrain::metrics

#endif  // DTRAIN_COMMON_METRICS_HTTP_EXPORTER_H_
