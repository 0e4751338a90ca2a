// MetricsServer: serves a Registry over HTTP for Prometheus to scrape, with civetweb (Debian's
// libcivetweb). Two paths:
//   GET /metrics   200, the registry in the text format 0.0.4 (Content-Type kTextContentType)
//   GET /healthz   200, "ok\n"
// HEAD works on both, other methods get 405 and other paths 404. Each scrape runs the
// registry's collect hooks on a civetweb thread (two threads; scrapes are serialized anyway).
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

struct mg_context;

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
  explicit MetricsServer(std::string listen) : listen_(std::move(listen)) {}
  const std::string listen_;
  mg_context* context_ = nullptr;
  int port_ = 0;
};

}  // namespace dtrain::metrics

#endif  // DTRAIN_COMMON_METRICS_HTTP_EXPORTER_H_
