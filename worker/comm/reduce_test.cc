#include "worker/comm/reduce.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace dtrain::comm {
namespace {

std::vector<std::byte> Bytes(const std::vector<float>& v) {
  std::vector<std::byte> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST(ReduceInto, AppliesEachOpElementWise) {
  const std::vector<float> a = {1, -2, 3, 8}, b = {4, 5, -6, 8};
  auto src = Bytes(b);
  std::vector<float> d = a;
  ReduceInto(d.data(), src.data(), 4, ReduceOp::kSum);
  EXPECT_EQ(d, (std::vector<float>{5, 3, -3, 16}));
  d = a;
  ReduceInto(d.data(), src.data(), 4, ReduceOp::kMin);
  EXPECT_EQ(d, (std::vector<float>{1, -2, -6, 8}));
  d = a;
  ReduceInto(d.data(), src.data(), 4, ReduceOp::kMax);
  EXPECT_EQ(d, (std::vector<float>{4, 5, 3, 8}));
  d = a;
  ReduceInto(d.data(), src.data(), 4, ReduceOp::kMean, /*divisor=*/2);
  EXPECT_EQ(d, (std::vector<float>{2.5f, 1.5f, -1.5f, 8}));
}

TEST(ReduceInto, MinAndMaxPropagateNaNFromEitherSide) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
    std::vector<float> d = {nan, 1};
    auto src = Bytes({1, nan});
    ReduceInto(d.data(), src.data(), 2, op);
    EXPECT_TRUE(std::isnan(d[0]) && std::isnan(d[1])) << ReduceOpName(op);
  }
}

TEST(ReduceInto, ReadsUnalignedSources) {
  std::vector<float> v = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<std::byte> raw(v.size() * 4 + 3);
  std::memcpy(raw.data() + 3, v.data(), v.size() * 4);
  std::vector<float> d(9, 1.0f);
  ReduceInto(d.data(), raw.data() + 3, 9, ReduceOp::kSum);
  EXPECT_EQ(d, (std::vector<float>{2, 3, 4, 5, 6, 7, 8, 9, 10}));
}

// Every way of cutting a message into two or three pieces, floats split included.
TEST(PieceReducer, AnyCutIntoPiecesGivesTheSameResult) {
  std::vector<float> v(11);
  for (int i = 0; i < 11; ++i) v[i] = 0.5f * i;
  auto src = Bytes(v);
  const int n = static_cast<int>(src.size());
  for (int cut1 = 0; cut1 <= n; ++cut1) {
    for (int cut2 = cut1; cut2 <= n; ++cut2) {
      std::vector<float> d(11, 1.0f);
      PieceReducer reduce(d.data(), 11, ReduceOp::kMean, /*divisor=*/2);
      reduce(0, absl::MakeConstSpan(src.data(), cut1));
      reduce(cut1, absl::MakeConstSpan(src.data() + cut1, cut2 - cut1));
      reduce(cut2, absl::MakeConstSpan(src.data() + cut2, n - cut2));
      int wrong = 0;
      for (int i = 0; i < 11; ++i) wrong += d[i] != (1.0f + 0.5f * i) / 2;
      ASSERT_EQ(wrong, 0) << "cuts " << cut1 << ", " << cut2;
    }
  }
}

}  // namespace
}  // namespace dtrain::comm
