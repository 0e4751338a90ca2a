// Real output through Debian's `promtool check metrics` (the prometheus package; tools/setup.sh
// installs it). Fails, never skips, when promtool is missing.
#include <cmath>
#include <limits>

#include "common/metrics/registry.h"
#include "common/metrics/testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::metrics {
namespace {

using ::testing::HasSubstr;

TEST(Promtool, AcceptsEveryKindWithEscapesAndSpecialValues) {
  Registry registry;
  auto requests =
      registry.AddCounter("dtrain_test_requests_total", "Requests by path.", {"path", "code"});
  auto level = registry.AddGauge("dtrain_test_level_bytes", "A level.", {"kind"});
  auto latency = registry.AddHistogram("dtrain_test_latency_seconds", "Latency.", {"job", "rank"},
                                       ExponentialBuckets(0.001, 2, 16));
  auto plain = registry.AddHistogram("dtrain_test_plain_seconds", "No labels.", {}, {});
  ASSERT_TRUE(requests.ok() && level.ok() && latency.ok() && plain.ok());
  (*requests)->Add({{"path", "C:\\dir \"x\"\nnext"}, {"code", "OK"}}).Increment(2);
  (*requests)->Add({{"path", "ünïcode"}, {"code", "NOT_FOUND"}}).Increment();
  (*level)->Add({{"kind", "inf"}}).Set(std::numeric_limits<double>::infinity());
  (*level)->Add({{"kind", "ninf"}}).Set(-std::numeric_limits<double>::infinity());
  (*level)->Add({{"kind", "nan"}}).Set(std::nan(""));
  (*level)->Add({{"kind", "tiny"}}).Set(1e-300);
  Histogram& h =
      (*latency)->Add({{"job", "job-000001"}, {"rank", "3"}}, ExponentialBuckets(0.001, 2, 16));
  for (double v : {0.0005, 0.002, 0.1, 7.0, 100.0}) h.Observe(v);
  (*plain)->Add({}, Buckets{}).Observe(1);
  const std::string text = registry.SerializeText();
  EXPECT_TRUE(testing::PromtoolCheckMetrics(text).ok()) << testing::PromtoolCheckMetrics(text);
}

// promtool really checks: a broken line and a lint problem (a counter without _total) fail.
TEST(Promtool, RejectsBrokenOutput) {
  absl::Status broken = testing::PromtoolCheckMetrics("# TYPE x counter\nx{a=\"1} 2\n");
  EXPECT_EQ(broken.code(), absl::StatusCode::kFailedPrecondition) << broken;
  Registry registry;
  ASSERT_TRUE(registry.AddCounter("dtrain_test_requests", "No _total suffix.").ok());
  absl::Status lint = testing::PromtoolCheckMetrics(registry.SerializeText());
  EXPECT_EQ(lint.code(), absl::StatusCode::kFailedPrecondition) << lint;
  EXPECT_THAT(lint.message(), HasSubstr("_total"));
}

}  // namespace
}  // namespace dtrain::metrics
