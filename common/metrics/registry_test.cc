// The glue around prometheus-cpp's registry: what it checks when a family is added, the stable
// page it produces (declared label order, sorted children and families), collect hooks, and
// updates from many threads during scrapes. prometheus-cpp's own metric arithmetic is its tests'.
#include "common/metrics/registry.h"

#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::metrics {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(Registry, PageHasDeclaredLabelOrderSortedChildrenAndFamiliesByName) {
  Registry registry;
  auto zeta = registry.AddGauge("zeta", "Last.", {"k"});
  auto alpha = registry.AddCounter("alpha_total", "First.");
  auto mid = registry.AddHistogram("mid_seconds", "Middle.", {"b", "a"}, {0.5, 1});
  ASSERT_TRUE(zeta.ok() && alpha.ok() && mid.ok());
  (*zeta)->Add({{"k", "y"}}).Set(2);
  (*zeta)->Add({{"k", "x"}}).Set(1);
  (*alpha)->Add({}).Increment(5);
  Histogram& h = (*mid)->Add({{"a", "1"}, {"b", "2"}}, Buckets{0.5, 1});
  h.Observe(0.5);  // le is inclusive: in the 0.5 bucket
  h.Observe(0.75);
  h.Observe(3);
  // prometheus-cpp's histogram layout: _count and _sum first, then the buckets.
  EXPECT_EQ(registry.SerializeText(),
            "# HELP alpha_total First.\n"
            "# TYPE alpha_total counter\n"
            "alpha_total 5\n"
            "# HELP mid_seconds Middle.\n"
            "# TYPE mid_seconds histogram\n"
            "mid_seconds_count{b=\"2\",a=\"1\"} 3\n"
            "mid_seconds_sum{b=\"2\",a=\"1\"} 4.25\n"
            "mid_seconds_bucket{b=\"2\",a=\"1\",le=\"0.5\"} 1\n"
            "mid_seconds_bucket{b=\"2\",a=\"1\",le=\"1\"} 2\n"
            "mid_seconds_bucket{b=\"2\",a=\"1\",le=\"+Inf\"} 3\n"
            "# HELP zeta Last.\n"
            "# TYPE zeta gauge\n"
            "zeta{k=\"x\"} 1\n"
            "zeta{k=\"y\"} 2\n");
}

TEST(Registry, ChildrenSortByValuesInDeclaredLabelOrder) {
  Registry registry;
  auto family = registry.AddCounter("c_total", "C.", {"z", "a"});
  ASSERT_TRUE(family.ok());
  (*family)->Add({{"z", "2"}, {"a", "1"}});
  (*family)->Add({{"z", "1"}, {"a", "2"}});
  EXPECT_EQ(registry.SerializeText(),
            "# HELP c_total C.\n# TYPE c_total counter\n"
            "c_total{z=\"1\",a=\"2\"} 0\n"
            "c_total{z=\"2\",a=\"1\"} 0\n");
}

TEST(Registry, FamilyWithoutLabelsExportsZeroFromTheStartOneWithLabelsNothing) {
  Registry registry;
  ASSERT_TRUE(registry.AddCounter("jobs_total", "Jobs.").ok());
  ASSERT_TRUE(registry.AddGauge("with_labels", "Nothing yet.", {"a"}).ok());
  ASSERT_TRUE(registry.AddHistogram("wait_seconds", "Waits.", {}, {1}).ok());
  EXPECT_EQ(registry.SerializeText(),
            "# HELP jobs_total Jobs.\n# TYPE jobs_total counter\njobs_total 0\n"
            "# HELP wait_seconds Waits.\n# TYPE wait_seconds histogram\n"
            "wait_seconds_count 0\nwait_seconds_sum 0\n"
            "wait_seconds_bucket{le=\"1\"} 0\nwait_seconds_bucket{le=\"+Inf\"} 0\n");
}

TEST(Registry, LabelValuesAreEscaped) {
  Registry registry;
  auto family = registry.AddGauge("g", "G.", {"path"});
  ASSERT_TRUE(family.ok());
  (*family)->Add({{"path", "C:\\dir \"x\"\nnext"}}).Set(1);
  EXPECT_THAT(registry.SerializeText(), HasSubstr("g{path=\"C:\\\\dir \\\"x\\\"\\nnext\"} 1\n"));
}

TEST(Registry, RejectsInvalidNamesHelpAndBucketsNamingTheFamily) {
  Registry registry;
  struct Case {
    std::string name, help;
    std::vector<std::string> labels;
    std::string why;
  };
  for (const Case& c : std::vector<Case>{
           {"", "h", {}, "not a metric name"},
           {"1abc", "h", {}, "not a metric name"},
           {"a-b", "h", {}, "not a metric name"},
           {"__reserved", "h", {}, "not a metric name"},
           {"ok_name", "", {}, "help text is empty"},
           {"ok_name", "two\nlines", {}, "newline or backslash"},
           {"ok_name", "back\\slash", {}, "newline or backslash"},
           {"ok_name", "h", {"a-b"}, "\"a-b\" is not a label name"},
           {"ok_name", "h", {"__x"}, "\"__x\" is not a label name"},
           {"ok_name", "h", {"a", "a"}, "\"a\" appears twice"},
       }) {
    auto family = registry.AddGauge(c.name, c.help, c.labels);
    EXPECT_EQ(family.status().code(), absl::StatusCode::kInvalidArgument) << c.name << c.help;
    EXPECT_THAT(family.status().message(), HasSubstr("\"" + c.name + "\"")) << c.why;
    EXPECT_THAT(family.status().message(), HasSubstr(c.why));
  }
  auto le = registry.AddHistogram("h_seconds", "h", {"le"}, {1});
  EXPECT_EQ(le.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(le.status().message(), HasSubstr("\"le\" is reserved"));
  for (const Buckets& bad : {Buckets{1, 1}, Buckets{2, 1}, Buckets{std::nan("")}}) {
    auto h = registry.AddHistogram("b_seconds", "h", {}, bad);
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(h.status().message(), HasSubstr("must increase strictly"));
  }
  // A rejected family reserved nothing.
  EXPECT_TRUE(registry.AddGauge("ok_name", "h").ok());
  EXPECT_TRUE(registry.AddHistogram("b_seconds", "h", {}, {1, 2}).ok());
}

TEST(Registry, ANameTakenTwiceIsAlreadyExistsWhateverTheKind) {
  Registry registry;
  ASSERT_TRUE(registry.AddCounter("x_total", "X.").ok());
  for (auto status :
       {registry.AddCounter("x_total", "X.").status(), registry.AddGauge("x_total", "X.").status(),
        registry.AddHistogram("x_total", "X.", {}, {}).status()}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
    EXPECT_THAT(status.message(), HasSubstr("\"x_total\""));
  }
}

TEST(Registry, RemovedChildIsNoLongerExported) {
  Registry registry;
  auto family = registry.AddCounter("c_total", "C.", {"job_id"});
  ASSERT_TRUE(family.ok());
  Counter& old_job = (*family)->Add({{"job_id", "job-000001"}});
  (*family)->Add({{"job_id", "job-000002"}});
  (*family)->Remove(&old_job);
  const std::string text = registry.SerializeText();
  EXPECT_THAT(text, Not(HasSubstr("job-000001")));
  EXPECT_THAT(text, HasSubstr("job-000002"));
}

TEST(Registry, CollectHooksRunOnEveryScrapeUntilRemoved) {
  Registry registry;
  auto workers = registry.AddGauge("workers", "By state.", {"state"});
  ASSERT_TRUE(workers.ok());
  int scrapes = 0;
  const Registry::HookId id = registry.AddCollectHook([&] {
    ++scrapes;
    (*workers)->Add({{"state", "idle"}}).Set(scrapes);
  });
  EXPECT_THAT(registry.SerializeText(), HasSubstr("workers{state=\"idle\"} 1\n"));
  EXPECT_THAT(registry.SerializeText(), HasSubstr("workers{state=\"idle\"} 2\n"));
  registry.RemoveCollectHook(id);
  EXPECT_THAT(registry.SerializeText(), HasSubstr("workers{state=\"idle\"} 2\n"));
  EXPECT_EQ(scrapes, 2);
}

TEST(Buckets, Exponential) {
  EXPECT_THAT(ExponentialBuckets(0.001, 2, 4), ElementsAre(0.001, 0.002, 0.004, 0.008));
  EXPECT_TRUE(ExponentialBuckets(1, 2, 0).empty());
}

TEST(Registry, ConcurrentUpdatesAndScrapes) {
  Registry registry;
  const Buckets buckets = {0.5, 1.5};
  auto counter = registry.AddCounter("ops_total", "h", {"kind"});
  auto gauge = registry.AddGauge("level", "h");
  auto histogram = registry.AddHistogram("lat_seconds", "h", {"kind"}, buckets);
  ASSERT_TRUE(counter.ok() && gauge.ok() && histogram.ok());
  constexpr int kThreads = 8, kIterations = 20000;
  (*counter)->Add({{"kind", "shared"}});
  std::atomic<bool> stop{false};
  std::atomic<int> bad_scrapes{0};
  std::thread scraper([&] {
    while (!stop.load()) {
      const std::string text = registry.SerializeText();
      if (text.find("ops_total{kind=\"shared\"}") == std::string::npos) ++bad_scrapes;
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Counter& c = (*counter)->Add({{"kind", "shared"}});
      Histogram& h = (*histogram)->Add({{"kind", "shared"}}, buckets);
      Gauge& g = (*gauge)->Add({});
      for (int i = 0; i < kIterations; ++i) {
        c.Increment();
        g.Increment();
        g.Decrement(0.5);
        h.Observe(i % 2);     // 0 and 1
        if (i % 1000 == 0) {  // churn: a per-thread child appears and goes
          Counter& mine = (*counter)->Add({{"kind", std::to_string(t)}});
          mine.Increment();
          (*counter)->Remove(&mine);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  stop = true;
  scraper.join();
  EXPECT_EQ(bad_scrapes.load(), 0);
  const std::string text = registry.SerializeText();
  EXPECT_THAT(text, HasSubstr("ops_total{kind=\"shared\"} 160000\n"));
  EXPECT_THAT(text, HasSubstr("level 80000\n"));
  EXPECT_THAT(text, HasSubstr("lat_seconds_bucket{kind=\"shared\",le=\"0.5\"} 80000\n"));
  EXPECT_THAT(text, HasSubstr("lat_seconds_bucket{kind=\"shared\",le=\"1.5\"} 160000\n"));
  EXPECT_THAT(text, HasSubstr("lat_seconds_sum{kind=\"shared\"} 80000\n"));
  EXPECT_THAT(text, Not(HasSubstr("kind=\"0\"")));
}

}  // namespace
}  // namespace dtrain::metrics
