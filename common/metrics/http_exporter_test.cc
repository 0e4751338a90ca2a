// MetricsServer (prometheus-cpp's Exposer) on loopback, fetched with a plain socket.
#include "common/metrics/http_exporter.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/metrics/testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::metrics {
namespace {

using ::testing::HasSubstr;
using testing::HttpRequest;
using ::testing::StartsWith;

class MetricsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto requests = registry_.AddCounter("test_requests_total", "Requests.", {"path"});
    ASSERT_TRUE(requests.ok());
    (*requests)->Add({{"path", "/a\"b"}}).Increment(3);
    auto server = MetricsServer::Start("127.0.0.1:0", &registry_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  Registry registry_;
  std::unique_ptr<MetricsServer> server_;
};

TEST_F(MetricsServerTest, ServesTheRegistryAndTheExposersOwnSeries) {
  ASSERT_GT(server_->port(), 0);
  auto response = HttpRequest(server_->port(), "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->code, 200);
  EXPECT_THAT(response->Header("Content-Type"), StartsWith("text/plain"));
  EXPECT_EQ(response->Header("Content-Length"), absl::StrCat(response->body.size()));
  EXPECT_THAT(response->body, HasSubstr("\n# HELP test_requests_total Requests.\n"
                                        "# TYPE test_requests_total counter\n"
                                        "test_requests_total{path=\"/a\\\"b\"} 3\n"));
  EXPECT_THAT(response->body, HasSubstr("\nexposer_scrapes_total "));
  absl::Status promtool = testing::PromtoolCheckMetrics(response->body);
  EXPECT_TRUE(promtool.ok()) << promtool;
}

TEST_F(MetricsServerTest, EachScrapeSeesCurrentValues) {
  auto gauge = registry_.AddGauge("test_level", "Level.");
  ASSERT_TRUE(gauge.ok());
  (*gauge)->Add({}).Set(42);
  auto response = HttpRequest(server_->port(), "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_THAT(response->body, HasSubstr("test_level 42\n"));
}

TEST_F(MetricsServerTest, EachScrapeTimesItsCollectInSeconds) {
  ASSERT_TRUE(HttpRequest(server_->port(), "/metrics").ok());
  auto response = HttpRequest(server_->port(), "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  // The first scrape's collect, seen by the second.
  EXPECT_THAT(response->body, HasSubstr("\n# TYPE dtrain_metrics_scrape_duration_seconds "
                                        "histogram\n"));
  EXPECT_THAT(response->body, HasSubstr("\ndtrain_metrics_scrape_duration_seconds_count 1\n"));
}

TEST_F(MetricsServerTest, HealthzAnswersOkAndNoMetricsText) {
  auto response = HttpRequest(server_->port(), "/healthz");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->code, 200);
  EXPECT_EQ(response->body, "ok\n");  // not the exposer_* series a collectable page carries
}

TEST_F(MetricsServerTest, OtherPathsAre404) {
  for (const char* path : {"/", "/nope", "/health"}) {
    auto response = HttpRequest(server_->port(), path);
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->code, 404) << path;
  }
}

TEST_F(MetricsServerTest, ConcurrentScrapes) {
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        auto response = HttpRequest(server_->port(), "/metrics");
        if (response.ok() && response->code == 200 &&
            response->body.find("test_requests_total{") != std::string::npos) {
          ++ok;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), 100);
}

TEST_F(MetricsServerTest, SecondServerOnTheSamePortFailsNamingTheAddress) {
  const std::string address = absl::StrCat("127.0.0.1:", server_->port());
  auto second = MetricsServer::Start(address, &registry_);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("cannot serve metrics on " + address));
}

TEST_F(MetricsServerTest, StopClosesThePortWithinASecond) {
  const int port = server_->port();
  const absl::Time start = absl::Now();
  server_->Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  server_->Stop();  // idempotent
  EXPECT_FALSE(HttpRequest(port, "/metrics").ok());
}

TEST(MetricsServer, RejectsMalformedAddresses) {
  Registry registry;
  for (const char* bad : {"", "host:", "127.0.0.1:http", "127.0.0.1:70000", "1.2.3.4:-1"}) {
    auto server = MetricsServer::Start(bad, &registry);
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(server.status().message(), HasSubstr(absl::StrCat("\"", bad, "\""))) << bad;
  }
}

TEST(MetricsServer, AddressNotOfThisMachineIsUnavailable) {
  Registry registry;
  auto server = MetricsServer::Start("192.0.2.1:0", &registry);  // TEST-NET-1
  EXPECT_EQ(server.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(server.status().message(), HasSubstr("192.0.2.1:0"));
}

TEST(MetricsServer, PortOnlyAndLocalhostForms) {
  Registry registry;
  for (const char* listen : {"0", ":0", "localhost:0"}) {
    auto server = MetricsServer::Start(listen, &registry);
    ASSERT_TRUE(server.ok()) << listen << ": " << server.status();
    auto response = HttpRequest((*server)->port(), "/healthz");
    ASSERT_TRUE(response.ok()) << listen << ": " << response.status();
    EXPECT_EQ(response->code, 200);
  }
}

}  // namespace
}  // namespace dtrain::metrics
