// The registry, families and metric kinds: creation rules, children, hooks, exact output, and
// concurrent updates during scrapes.
#include "common/metrics/registry.h"

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::metrics {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(Registry, AddReturnsTheSameChildForTheSameLabelsInAnyOrder) {
  Registry registry;
  auto family = registry.AddCounter("c_total", "C.", {"job", "rank"});
  ASSERT_TRUE(family.ok()) << family.status();
  Counter& a = (*family)->Add({{"job", "j"}, {"rank", "1"}});
  Counter& b = (*family)->Add({{"rank", "1"}, {"job", "j"}});
  EXPECT_EQ(&a, &b);
  a.Increment();
  b.Increment(2);
  EXPECT_EQ(a.Value(), 3);
  EXPECT_EQ((*family)->size(), 1u);
}

TEST(Registry, SerializesFamiliesSortedByNameAndChildrenByLabelValues) {
  Registry registry;
  auto zeta = registry.AddGauge("zeta", "Last.", {"k"});
  auto alpha = registry.AddCounter("alpha_total", "First.");
  auto mid = registry.AddHistogram("mid_seconds", "Middle.", {"b", "a"}, {0.5, 1});
  ASSERT_TRUE(zeta.ok() && alpha.ok() && mid.ok());
  (*zeta)->Add({{"k", "y"}}).Set(2);
  (*zeta)->Add({{"k", "x"}}).Set(1);
  (*alpha)->Add({}).Increment(5);
  Histogram& h = (*mid)->Add({{"a", "1"}, {"b", "2"}});
  h.Observe(0.5);  // le is inclusive: in the 0.5 bucket
  h.Observe(0.75);
  h.Observe(3);
  EXPECT_EQ(registry.SerializeText(),
            "# HELP alpha_total First.\n"
            "# TYPE alpha_total counter\n"
            "alpha_total 5\n"
            "# HELP mid_seconds Middle.\n"
            "# TYPE mid_seconds histogram\n"
            "mid_seconds_bucket{b=\"2\",a=\"1\",le=\"0.5\"} 1\n"
            "mid_seconds_bucket{b=\"2\",a=\"1\",le=\"1\"} 2\n"
            "mid_seconds_bucket{b=\"2\",a=\"1\",le=\"+Inf\"} 3\n"
            "mid_seconds_sum{b=\"2\",a=\"1\"} 4.25\n"
            "mid_seconds_count{b=\"2\",a=\"1\"} 3\n"
            "# HELP zeta Last.\n"
            "# TYPE zeta gauge\n"
            "zeta{k=\"x\"} 1\n"
            "zeta{k=\"y\"} 2\n");
}

TEST(Registry, FamilyWithoutLabelsExportsZeroFromTheStart) {
  Registry registry;
  ASSERT_TRUE(registry.AddCounter("jobs_total", "Jobs.").ok());
  ASSERT_TRUE(registry.AddGauge("with_labels", "Nothing yet.", {"a"}).ok());
  EXPECT_EQ(registry.SerializeText(),
            "# HELP jobs_total Jobs.\n# TYPE jobs_total counter\njobs_total 0\n");
}

TEST(Registry, RejectsInvalidNames) {
  Registry registry;
  auto code = [](const auto& result) { return result.status().code(); };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code(registry.AddCounter("", "h")), kInvalid);
  EXPECT_EQ(code(registry.AddCounter("1abc", "h")), kInvalid);
  EXPECT_EQ(code(registry.AddCounter("a-b", "h")), kInvalid);
  EXPECT_EQ(code(registry.AddCounter("__reserved", "h")), kInvalid);
  EXPECT_EQ(code(registry.AddCounter("ok_name", "")), kInvalid);  // help required
  EXPECT_EQ(code(registry.AddCounter("ok_name", "h", {"a:b"})), kInvalid);
  EXPECT_EQ(code(registry.AddCounter("ok_name", "h", {"9a"})), kInvalid);
  EXPECT_EQ(code(registry.AddCounter("ok_name", "h", {"__name__"})), kInvalid);
  EXPECT_EQ(code(registry.AddCounter("ok_name", "h", {"a", "a"})), kInvalid);
  EXPECT_EQ(code(registry.AddHistogram("ok_h", "h", {"le"}, {1})), kInvalid);
  EXPECT_EQ(code(registry.AddHistogram("ok_h", "h", {}, {2, 1})), kInvalid);
  EXPECT_EQ(code(registry.AddHistogram("ok_h", "h", {}, {1, 1})), kInvalid);
  EXPECT_EQ(code(registry.AddHistogram("ok_h", "h", {}, {std::nan("")})), kInvalid);
  EXPECT_EQ(code(registry.AddHistogram("ok_h", "h", {}, {INFINITY, 1})), kInvalid);
  EXPECT_EQ(code(registry.AddHistogram("ok_h", "h", {}, ExponentialBuckets(1, 0.5, 3))), kInvalid);
  // Allowed: colons in metric names, "le" outside histograms, a trailing +Inf, no buckets.
  EXPECT_TRUE(registry.AddCounter("a:b_total", "h", {"le"}).ok());
  EXPECT_TRUE(registry.AddHistogram("ok_h", "h", {"_x"}, {1, INFINITY}).ok());
  EXPECT_TRUE(registry.AddHistogram("no_buckets", "h", {}, {}).ok());

  auto bad = registry.AddCounter("ok_name", "h", {"a", "a"});
  EXPECT_THAT(bad.status().message(), HasSubstr("\"ok_name\": label name \"a\" appears twice"));
}

TEST(Registry, RejectsNamesTakenByAnotherFamilyOrAHistogramsSeries) {
  Registry registry;
  ASSERT_TRUE(registry.AddCounter("x_total", "h").ok());
  EXPECT_EQ(registry.AddGauge("x_total", "h").status().code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(registry.AddHistogram("lat", "h", {}, {1}).ok());
  EXPECT_EQ(registry.AddGauge("lat_count", "h").status().code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(registry.AddGauge("depth_sum", "h").ok());
  EXPECT_EQ(registry.AddHistogram("depth", "h", {}, {1}).status().code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(Family, TryAddNamesAMissingOrUnknownLabel) {
  Registry registry;
  auto family = registry.AddGauge("g", "h", {"job", "rank"});
  ASSERT_TRUE(family.ok());
  auto missing = (*family)->TryAdd({{"job", "j"}});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("label \"rank\" has no value"));
  auto unknown = (*family)->TryAdd({{"job", "j"}, {"rank", "0"}, {"host", "h"}});
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown label \"host\""));
  // Add with bad labels: a working child that is never exported.
  (*family)->Add({{"jobb", "j"}}).Set(7);
  EXPECT_EQ((*family)->size(), 0u);
  EXPECT_EQ(registry.SerializeText(), "");
}

TEST(Family, RemoveByLabelsOrPointer) {
  Registry registry;
  auto family = registry.AddCounter("c_total", "h", {"job"});
  ASSERT_TRUE(family.ok());
  (*family)->Add({{"job", "a"}}).Increment();
  Counter& b = (*family)->Add({{"job", "b"}});
  EXPECT_TRUE((*family)->Remove({{"job", "a"}}));
  EXPECT_FALSE((*family)->Remove({{"job", "a"}}));
  EXPECT_TRUE((*family)->Remove(&b));
  EXPECT_FALSE((*family)->Remove(&b));
  EXPECT_EQ((*family)->size(), 0u);
  EXPECT_EQ((*family)->Add({{"job", "a"}}).Value(), 0);  // fresh after removal
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

TEST(Counter, IgnoresNegativeAndNaN) {
  Counter c;
  c.Increment(2);
  c.Increment(-1);
  c.Increment(std::nan(""));
  EXPECT_EQ(c.Value(), 2);
}

TEST(Gauge, SetIncrementDecrement) {
  Gauge g;
  g.Set(5);
  g.Increment();
  g.Decrement(2.5);
  EXPECT_EQ(g.Value(), 3.5);
}

TEST(Histogram, BucketsAreInclusiveAndNaNGoesToInf) {
  Histogram h({1, 2});
  for (double v : {-1.0, 1.0, 1.5, 2.0, 2.5}) h.Observe(v);
  h.Observe(absl::Milliseconds(1500));
  ChildSnapshot s;
  h.Collect(&s);
  EXPECT_THAT(s.cumulative_counts, ElementsAre(2, 5, 6));
  EXPECT_EQ(s.sum, 7.5);
  h.Observe(std::nan(""));
  h.Collect(&s);
  EXPECT_THAT(s.cumulative_counts, ElementsAre(2, 5, 7));
  EXPECT_TRUE(std::isnan(s.sum));
  EXPECT_EQ(h.Count(), 7u);
}

TEST(Buckets, Helpers) {
  EXPECT_THAT(ExponentialBuckets(1, 2, 4), ElementsAre(1, 2, 4, 8));
  EXPECT_THAT(LinearBuckets(0, 0.5, 3), ElementsAre(0, 0.5, 1));
  EXPECT_TRUE(ValidateBuckets(DefaultBuckets()).ok());
  EXPECT_TRUE(ValidateBuckets(ExponentialBuckets(0.001, 2, 16)).ok());
}

// Threads update shared children while others add/remove children and scrape; the totals are
// exact afterwards (small integers are exact in doubles).
TEST(Registry, ConcurrentUpdatesAndScrapes) {
  Registry registry;
  auto counter = registry.AddCounter("ops_total", "h", {"kind"});
  auto gauge = registry.AddGauge("level", "h");
  auto histogram = registry.AddHistogram("lat_seconds", "h", {"kind"}, {0.5, 1.5});
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
      Histogram& h = (*histogram)->Add({{"kind", "shared"}});
      Gauge& g = (*gauge)->Add({});
      for (int i = 0; i < kIterations; ++i) {
        c.Increment();
        g.Increment();
        g.Decrement(0.5);
        h.Observe(i % 2);     // 0 and 1
        if (i % 1000 == 0) {  // churn: a per-thread child appears and goes
          const Labels mine = {{"kind", std::to_string(t)}};
          (*counter)->Add(mine).Increment();
          (*counter)->Remove(mine);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  stop = true;
  scraper.join();
  EXPECT_EQ(bad_scrapes.load(), 0);
  EXPECT_EQ((*counter)->Add({{"kind", "shared"}}).Value(), kThreads * kIterations);
  EXPECT_EQ((*gauge)->Add({}).Value(), kThreads * kIterations * 0.5);
  Histogram& h = (*histogram)->Add({{"kind", "shared"}});
  ChildSnapshot s;
  h.Collect(&s);
  EXPECT_THAT(s.cumulative_counts, ElementsAre(kThreads * kIterations / 2, kThreads * kIterations,
                                               kThreads * kIterations));
  EXPECT_EQ(s.sum, kThreads * kIterations / 2);
  EXPECT_EQ((*counter)->size(), 1u);
}

}  // namespace
}  // namespace dtrain::metrics
