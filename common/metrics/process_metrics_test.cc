#include "common/metrics/process_metrics.h"

#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::metrics {
namespace {

using ::testing::HasSubstr;

// The value of the series line starting with `prefix` ("process_threads "), -1 if absent.
double Value(const std::string& text, const std::string& prefix) {
  const size_t at = text.find("\n" + prefix);
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + 1 + prefix.size()));
}

TEST(ProcessMetrics, ReadsThisProcess) {
  Registry registry;
  ASSERT_TRUE(ExportProcessMetrics(&registry).ok());
  std::atomic<bool> scraped{false};
  std::thread extra([&scraped] {  // a second thread until scraped
    while (!scraped) usleep(1000);
  });
  volatile double spin = 0;
  for (int i = 0; i < 20000000; ++i) spin = spin + i;  // some CPU time
  const std::string text = registry.SerializeText();
  scraped = true;
  extra.join();
  EXPECT_GE(Value(text, "process_threads "), 2);
  EXPECT_GT(Value(text, "process_resident_memory_bytes "), 1 << 20);
  EXPECT_GE(Value(text, "process_virtual_memory_bytes "),
            Value(text, "process_resident_memory_bytes "));
  EXPECT_GE(Value(text, "process_open_fds "), 3);  // stdin, stdout, stderr at least
  EXPECT_GT(Value(text, "process_max_fds "), Value(text, "process_open_fds "));
  EXPECT_GT(Value(text, "process_cpu_seconds_total "), 0);
  const double start = Value(text, "process_start_time_seconds ");
  const double now = static_cast<double>(time(nullptr));
  EXPECT_GT(start, now - 3600);
  EXPECT_LE(start, now + 1);
  EXPECT_THAT(text, HasSubstr("# TYPE process_cpu_seconds_total counter"));
  EXPECT_THAT(text, HasSubstr("dtrain_build_info{version=\""));
  // The counter only grows between scrapes.
  const double before = Value(text, "process_cpu_seconds_total ");
  for (int i = 0; i < 20000000; ++i) spin = spin + i;
  EXPECT_GE(Value(registry.SerializeText(), "process_cpu_seconds_total "), before);
}

TEST(ProcessMetrics, TwiceOnOneRegistryIsAlreadyExists) {
  Registry registry;
  ASSERT_TRUE(ExportProcessMetrics(&registry).ok());
  EXPECT_EQ(ExportProcessMetrics(&registry).code(), absl::StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace dtrain::metrics
