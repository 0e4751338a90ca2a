// The text exposition format 0.0.4 on hand-built snapshots: exact expected text.
#include "common/metrics/text_format.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace dtrain::metrics {
namespace {

TEST(FormatDouble, ShortestRoundTripAndSpecialValues) {
  EXPECT_EQ(FormatDouble(0), "0");
  EXPECT_EQ(FormatDouble(3), "3");
  EXPECT_EQ(FormatDouble(-2.5), "-2.5");
  EXPECT_EQ(FormatDouble(0.1), "0.1");
  EXPECT_EQ(FormatDouble(1e-6), "1e-06");
  EXPECT_EQ(FormatDouble(1e21), "1e+21");
  EXPECT_EQ(FormatDouble(123456789012), "123456789012");
  EXPECT_EQ(FormatDouble(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatDouble(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatDouble(std::nan("")), "NaN");
  EXPECT_EQ(std::stod(FormatDouble(0.1 + 0.2)), 0.1 + 0.2);
}

TEST(Escape, LabelValueEscapesBackslashQuoteNewline) {
  EXPECT_EQ(EscapeLabelValue(R"(C:\dir "x")"
                             "\nend"),
            R"(C:\\dir \"x\"\nend)");
  EXPECT_EQ(EscapeLabelValue("plain ünïcode"), "plain ünïcode");
}

TEST(Escape, HelpEscapesBackslashAndNewlineOnly) {
  EXPECT_EQ(EscapeHelp("a \\ b \"q\"\nnext"), R"(a \\ b "q"\nnext)");
}

TEST(SerializeText, CounterWithLabelsInDeclaredOrder) {
  FamilySnapshot f;
  f.name = "dtrain_rpcs_total";
  f.help = "RPCs by method and code.";
  f.type = MetricType::kCounter;
  f.label_names = {"method", "code"};  // declared order, not alphabetical
  f.children.push_back({{"GetJob", "OK"}, 3});
  f.children.push_back({{"SubmitJob", "INVALID_ARGUMENT"}, 1});
  EXPECT_EQ(SerializeText({f}),
            "# HELP dtrain_rpcs_total RPCs by method and code.\n"
            "# TYPE dtrain_rpcs_total counter\n"
            "dtrain_rpcs_total{method=\"GetJob\",code=\"OK\"} 3\n"
            "dtrain_rpcs_total{method=\"SubmitJob\",code=\"INVALID_ARGUMENT\"} 1\n");
}

TEST(SerializeText, NoLabelsNoBraces) {
  FamilySnapshot f;
  f.name = "up_gauge";
  f.help = "h";
  f.type = MetricType::kGauge;
  f.children.push_back({{}, -1.5});
  EXPECT_EQ(SerializeText({f}), "# HELP up_gauge h\n# TYPE up_gauge gauge\nup_gauge -1.5\n");
}

TEST(SerializeText, EscapesLabelValuesAndHelp) {
  FamilySnapshot f;
  f.name = "x";
  f.help = "back\\slash\nsecond line";
  f.type = MetricType::kGauge;
  f.label_names = {"path"};
  f.children.push_back({{"a\\b\"c\nd"}, 1});
  EXPECT_EQ(SerializeText({f}),
            "# HELP x back\\\\slash\\nsecond line\n"
            "# TYPE x gauge\n"
            "x{path=\"a\\\\b\\\"c\\nd\"} 1\n");
}

TEST(SerializeText, SpecialValues) {
  FamilySnapshot f;
  f.name = "g";
  f.help = "h";
  f.type = MetricType::kGauge;
  f.label_names = {"k"};
  f.children.push_back({{"inf"}, std::numeric_limits<double>::infinity()});
  f.children.push_back({{"nan"}, std::nan("")});
  f.children.push_back({{"ninf"}, -std::numeric_limits<double>::infinity()});
  EXPECT_EQ(SerializeText({f}),
            "# HELP g h\n# TYPE g gauge\n"
            "g{k=\"inf\"} +Inf\ng{k=\"nan\"} NaN\ng{k=\"ninf\"} -Inf\n");
}

TEST(SerializeText, HistogramBucketsCumulativeWithLeLast) {
  FamilySnapshot f;
  f.name = "wait_seconds";
  f.help = "Wait.";
  f.type = MetricType::kHistogram;
  f.label_names = {"job", "rank"};
  f.bounds = {0.1, 1, 10};
  ChildSnapshot c;
  c.label_values = {"j1", "0"};
  c.cumulative_counts = {1, 1, 3, 4};
  c.sum = 25.5;
  f.children.push_back(c);
  EXPECT_EQ(SerializeText({f}),
            "# HELP wait_seconds Wait.\n"
            "# TYPE wait_seconds histogram\n"
            "wait_seconds_bucket{job=\"j1\",rank=\"0\",le=\"0.1\"} 1\n"
            "wait_seconds_bucket{job=\"j1\",rank=\"0\",le=\"1\"} 1\n"
            "wait_seconds_bucket{job=\"j1\",rank=\"0\",le=\"10\"} 3\n"
            "wait_seconds_bucket{job=\"j1\",rank=\"0\",le=\"+Inf\"} 4\n"
            "wait_seconds_sum{job=\"j1\",rank=\"0\"} 25.5\n"
            "wait_seconds_count{job=\"j1\",rank=\"0\"} 4\n");
}

TEST(SerializeText, HistogramWithoutLabelsOrBounds) {
  FamilySnapshot f;
  f.name = "h";
  f.help = "H.";
  f.type = MetricType::kHistogram;
  ChildSnapshot c;
  c.cumulative_counts = {2};
  c.sum = 0.5;
  f.children.push_back(c);
  EXPECT_EQ(SerializeText({f}),
            "# HELP h H.\n# TYPE h histogram\n"
            "h_bucket{le=\"+Inf\"} 2\nh_sum 0.5\nh_count 2\n");
}

TEST(SerializeText, FamilyWithoutChildrenWritesNothing) {
  FamilySnapshot empty;
  empty.name = "empty";
  empty.help = "h";
  empty.label_names = {"a"};
  EXPECT_EQ(SerializeText({empty}), "");
  EXPECT_EQ(SerializeText({}), "");
}

}  // namespace
}  // namespace dtrain::metrics
