// Collectives against closed-form oracles: one thread per rank, over the in-process transport
// (whole frames, and frames cut into 7-byte pieces that split floats) and over gRPC on
// loopback; groups of 1 to 8 ranks; sizes 0, below, around and far above the rank count.
// Inputs are small integers, so every sum is exact in float and results must match bit for
// bit; failures report the number of wrong elements.
#include <atomic>
#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/comm/collectives/all_gather.h"
#include "worker/comm/collectives/allreduce_hierarchical.h"
#include "worker/comm/collectives/allreduce_ring.h"
#include "worker/comm/collectives/barrier.h"
#include "worker/comm/collectives/broadcast.h"
#include "worker/comm/collectives/reduce_scatter.h"
#include "worker/comm/testing/closed_forms.h"
#include "worker/comm/testing/cluster.h"

namespace dtrain::comm {
namespace {

using testing::Cluster;
using testing::Expected;
using testing::Input;
using testing::TransportKind;

std::vector<float> Inputs(int rank, int64_t count) {
  std::vector<float> v(count);
  for (int64_t i = 0; i < count; ++i) v[i] = Input(rank, i);
  return v;
}

std::vector<int64_t> Sizes(int n) {
  std::vector<int64_t> sizes = {0, 1, n + 1, 1000, 4097, 70001};
  if (n > 2) sizes.push_back(n - 1);
  return sizes;
}

class CollectivesTest : public ::testing::TestWithParam<std::tuple<TransportKind, int>> {
 protected:
  void SetUp() override {
    cluster_ = Cluster::Create(std::get<0>(GetParam()), std::get<1>(GetParam()));
  }
  int n() const { return std::get<1>(GetParam()); }

  // A group of every rank, in rank order, on rank r's transport.
  Group MakeGroup(int r, CollectiveOptions options = {}) {
    std::vector<int> ranks;
    for (int i = 0; i < n(); ++i) ranks.push_back(i);
    options.timeout = absl::Seconds(30);
    return *Group::Create(cluster_->transport(r), ranks, /*id=*/5, options);
  }

  void ExpectAllOk(const std::vector<absl::Status>& results) {
    for (int r = 0; r < static_cast<int>(results.size()); ++r) {
      EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
    }
  }

  std::unique_ptr<Cluster> cluster_;
};

TEST_P(CollectivesTest, AllReduceMatchesClosedForm) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMin, ReduceOp::kMax}) {
    std::vector<std::vector<int64_t>> wrong(n());
    ExpectAllOk(cluster_->Run([&](int r) -> absl::Status {
      Group group = MakeGroup(r);
      for (int64_t count : Sizes(n())) {
        std::vector<float> data = Inputs(r, count);
        absl::Status s = AllReduce(group, absl::MakeSpan(data), op);
        if (!s.ok()) return s;
        int64_t bad = 0;
        for (int64_t i = 0; i < count; ++i) bad += data[i] != Expected(op, n(), i);
        wrong[r].push_back(bad);
      }
      return absl::OkStatus();
    }));
    for (int r = 0; r < n(); ++r) {
      for (size_t k = 0; k < wrong[r].size(); ++k) {
        EXPECT_EQ(wrong[r][k], 0) << ReduceOpName(op) << ", rank " << r << ", " << Sizes(n())[k]
                                  << " floats";
      }
    }
  }
}

// Hierarchical all-reduce (per host, across hosts, back) against the flat ring and the closed
// form, bit for bit, for two placements: hosts of two adjacent members, and members dealt to
// three hosts in turn (a host's members are not neighbours in the ring).
TEST_P(CollectivesTest, HierarchicalAllReduceEqualsTheFlatRing) {
  const std::vector<std::function<std::string(int)>> placements = {
      [](int i) { return absl::StrCat("host", i / 2); },
      [](int i) { return absl::StrCat("host", i % 3); }};
  for (const auto& host_of : placements) {
    std::vector<std::string> hosts;
    for (int i = 0; i < n(); ++i) hosts.push_back(host_of(i));
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMin, ReduceOp::kMax}) {
      std::vector<std::vector<int64_t>> wrong(n());
      std::vector<char> hierarchical(n());  // not vector<bool>: ranks write it at once
      ExpectAllOk(cluster_->Run([&](int r) -> absl::Status {
        Group group = MakeGroup(r);
        absl::StatusOr<HierarchicalAllReduce> h =
            HierarchicalAllReduce::Create(&group, hosts, /*local_id=*/6, /*leaders_id=*/7);
        if (!h.ok()) return h.status();
        hierarchical[r] = h->hierarchical();
        for (int64_t count : Sizes(n())) {
          std::vector<float> flat = Inputs(r, count), data = Inputs(r, count);
          absl::Status s = AllReduce(group, absl::MakeSpan(flat), op);
          if (s.ok()) s = h->Run(absl::MakeSpan(data), op);
          if (!s.ok()) return s;
          int64_t bad = 0;
          for (int64_t i = 0; i < count; ++i) {
            bad += data[i] != flat[i] || data[i] != Expected(op, n(), i);
          }
          wrong[r].push_back(bad);
        }
        return absl::OkStatus();
      }));
      // Several hosts, one of them with two members or more.
      const size_t distinct = std::set<std::string>(hosts.begin(), hosts.end()).size();
      const bool expect_hierarchical = distinct > 1 && distinct < hosts.size();
      for (int r = 0; r < n(); ++r) {
        EXPECT_EQ(hierarchical[r] != 0, expect_hierarchical) << "rank " << r;
        for (int64_t bad : wrong[r]) EXPECT_EQ(bad, 0) << ReduceOpName(op) << ", rank " << r;
      }
    }
  }
}

TEST_P(CollectivesTest, AllReduceInSmallChunksMatchesClosedForm) {
  CollectiveOptions options;
  options.chunk_bytes = 64;  // 16 floats: many messages per segment
  std::vector<int64_t> wrong(n(), -1);
  ExpectAllOk(cluster_->Run([&](int r) -> absl::Status {
    Group group = MakeGroup(r, options);
    std::vector<float> data = Inputs(r, 1001);
    absl::Status s = AllReduce(group, absl::MakeSpan(data), ReduceOp::kSum);
    wrong[r] = 0;
    for (int64_t i = 0; i < 1001; ++i) wrong[r] += data[i] != Expected(ReduceOp::kSum, n(), i);
    return s;
  }));
  for (int r = 0; r < n(); ++r) EXPECT_EQ(wrong[r], 0) << "rank " << r;
}

TEST_P(CollectivesTest, ReduceScatterLeavesEachMemberItsReducedSegment) {
  std::vector<std::vector<int64_t>> wrong(n());
  ExpectAllOk(cluster_->Run([&](int r) -> absl::Status {
    Group group = MakeGroup(r);
    for (int64_t count : Sizes(n())) {
      std::vector<float> data = Inputs(r, count);
      absl::Status s = ReduceScatter(group, absl::MakeSpan(data), ReduceOp::kMean);
      if (!s.ok()) return s;
      Segment mine = RingSegment(count, n(), r);
      int64_t bad = 0;
      for (int64_t i = mine.begin; i < mine.begin + mine.size; ++i) {
        bad += data[i] != Expected(ReduceOp::kMean, n(), i);
      }
      wrong[r].push_back(bad);
    }
    return absl::OkStatus();
  }));
  for (int r = 0; r < n(); ++r) {
    for (int64_t bad : wrong[r]) EXPECT_EQ(bad, 0) << "rank " << r;
  }
}

TEST_P(CollectivesTest, AllGatherGivesEveryMemberEverySegment) {
  std::vector<std::vector<int64_t>> wrong(n());
  ExpectAllOk(cluster_->Run([&](int r) -> absl::Status {
    Group group = MakeGroup(r);
    for (int64_t count : Sizes(n())) {
      // Member i owns segment i, filled with Input(i, .); the rest holds garbage.
      std::vector<float> data(count, -1000.0f);
      Segment mine = RingSegment(count, n(), r);
      for (int64_t i = mine.begin; i < mine.begin + mine.size; ++i) data[i] = Input(r, i);
      absl::Status s = AllGather(group, absl::MakeSpan(data));
      if (!s.ok()) return s;
      int64_t bad = 0;
      for (int owner = 0; owner < n(); ++owner) {
        Segment seg = RingSegment(count, n(), owner);
        for (int64_t i = seg.begin; i < seg.begin + seg.size; ++i)
          bad += data[i] != Input(owner, i);
      }
      wrong[r].push_back(bad);
    }
    return absl::OkStatus();
  }));
  for (int r = 0; r < n(); ++r) {
    for (int64_t bad : wrong[r]) EXPECT_EQ(bad, 0) << "rank " << r;
  }
}

TEST_P(CollectivesTest, BroadcastCopiesTheRootToEveryMember) {
  std::vector<std::vector<int64_t>> wrong(n());
  ExpectAllOk(cluster_->Run([&](int r) -> absl::Status {
    CollectiveOptions options;
    options.chunk_bytes = 4096;
    Group group = MakeGroup(r, options);
    for (int root : {0, n() - 1}) {
      for (int64_t count : Sizes(n())) {
        std::vector<float> data = Inputs(r, count);
        absl::Status s = Broadcast(group, absl::MakeSpan(data), root);
        if (!s.ok()) return s;
        int64_t bad = 0;
        for (int64_t i = 0; i < count; ++i) bad += data[i] != Input(root, i);
        wrong[r].push_back(bad);
      }
    }
    return absl::OkStatus();
  }));
  for (int r = 0; r < n(); ++r) {
    for (int64_t bad : wrong[r]) EXPECT_EQ(bad, 0) << "rank " << r;
  }
}

TEST_P(CollectivesTest, BarrierReturnsOnlyAfterEveryMemberEntered) {
  std::atomic<int> entered{0};
  std::vector<int> seen(n(), -1);
  ExpectAllOk(cluster_->Run([&](int r) -> absl::Status {
    Group group = MakeGroup(r);
    absl::SleepFor(absl::Milliseconds(20 * r));  // arrive one after another
    entered.fetch_add(1);
    absl::Status s = Barrier(group);
    seen[r] = entered.load();
    return s;
  }));
  for (int r = 0; r < n(); ++r) EXPECT_EQ(seen[r], n()) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(
    Ranks, CollectivesTest,
    ::testing::Combine(::testing::Values(TransportKind::kInproc, TransportKind::kInprocPieces,
                                         TransportKind::kGrpc, TransportKind::kShm,
                                         TransportKind::kTlsSockets),
                       ::testing::Range(1, 9)),
    [](const ::testing::TestParamInfo<CollectivesTest::ParamType>& info) {
      return absl::StrCat(testing::KindName(std::get<0>(info.param)), "_", std::get<1>(info.param),
                          "ranks");
    });

TEST(AllreduceRing, ZeroElementsIsNoOp) {
  auto cluster = Cluster::Create(TransportKind::kInproc, 3);
  auto results = cluster->Run([&](int r) -> absl::Status {
    Group group = *Group::Create(cluster->transport(r), {0, 1, 2}, 1);
    std::vector<float> empty;
    return AllReduce(group, absl::MakeSpan(empty), ReduceOp::kSum);
  });
  for (const auto& s : results) EXPECT_TRUE(s.ok()) << s;
}

TEST(AllreduceRing, OneRankLeavesDataUnchanged) {
  InprocHub hub(1);
  Group group = *Group::Create(hub.transport(0), {0}, 1);
  std::vector<float> data = {1.5f, -2.0f, 3.25f};
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMin, ReduceOp::kMax}) {
    ASSERT_TRUE(AllReduce(group, absl::MakeSpan(data), op).ok());
  }
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f, 3.25f}));
}

TEST(AllreduceRing, SubgroupUsesItsOwnRingOrder) {
  // Ranks 3, 1, 2 of a 4-rank job; rank 0 is not a member and does nothing.
  auto cluster = Cluster::Create(TransportKind::kInproc, 4);
  std::vector<float> results(4, 0);
  auto statuses = cluster->Run([&](int r) -> absl::Status {
    if (r == 0) return absl::OkStatus();
    Group group = *Group::Create(cluster->transport(r), {3, 1, 2}, 9);
    std::vector<float> data = {static_cast<float>(r)};
    absl::Status s = AllReduce(group, absl::MakeSpan(data), ReduceOp::kSum);
    results[r] = data[0];
    return s;
  });
  for (const auto& s : statuses) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(results, (std::vector<float>{0, 6, 6, 6}));
}

TEST(AllreduceRing, MismatchedSizesFailWithInvalidArgument) {
  auto cluster = Cluster::Create(TransportKind::kInproc, 2);
  auto results = cluster->Run([&](int r) -> absl::Status {
    CollectiveOptions options;
    options.timeout = absl::Seconds(2);
    Group group = *Group::Create(cluster->transport(r), {0, 1}, 1, options);
    std::vector<float> data(r == 0 ? 100 : 102, 1.0f);
    return AllReduce(group, absl::MakeSpan(data), ReduceOp::kSum);
  });
  // Whichever rank sees the mismatch first fails with INVALID_ARGUMENT; the
  // other may instead be told by its peer that the op was given up (ABORTED).
  // Either way every rank fails and its message carries the shape problem.
  int invalid = 0;
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(results[r].code() == absl::StatusCode::kInvalidArgument ||
                results[r].code() == absl::StatusCode::kAborted)
        << results[r];
    if (results[r].code() == absl::StatusCode::kInvalidArgument) ++invalid;
    EXPECT_NE(results[r].message().find("all-reduce sum"), std::string::npos) << results[r];
    EXPECT_NE(results[r].message().find("expected f32["), std::string::npos) << results[r];
  }
  EXPECT_GE(invalid, 1);
}

// The test-only hook behind dtrain-worker --test_only_skip_collective: the member that skips
// sequence number 1 runs its second all-reduce as op 2 while its partner runs op 1. Neither
// waits for its deadline: each sees the other's op first in its in-order stream and fails at
// once with a sequence mismatch naming both ops (or, second, with the other's abort).
TEST(AllreduceRing, SkippedSequenceNumberFailsAtOnceAsASequenceMismatch) {
  auto cluster = Cluster::Create(TransportKind::kInproc, 2);
  const absl::Time start = absl::Now();
  auto results = cluster->Run([&](int r) -> absl::Status {
    CollectiveOptions options;
    options.timeout = absl::Seconds(30);
    if (r == 1) options.test_only_skip_seq = 1;
    Group group = *Group::Create(cluster->transport(r), {0, 1}, 1, options);
    std::vector<float> data(10, 1.0f);
    absl::Status first = AllReduce(group, absl::MakeSpan(data), ReduceOp::kSum);
    if (!first.ok()) return absl::InternalError(absl::StrCat("op 0 failed: ", first.message()));
    return AllReduce(group, absl::MakeSpan(data), ReduceOp::kSum);
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  int mismatches = 0;
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(results[r].code() == absl::StatusCode::kInvalidArgument ||
                results[r].code() == absl::StatusCode::kAborted)
        << "rank " << r << ": " << results[r];
    if (results[r].code() != absl::StatusCode::kInvalidArgument) continue;
    ++mismatches;
    EXPECT_NE(results[r].message().find("sequence mismatch"), std::string::npos) << results[r];
    const std::string ops = r == 0 ? "this rank is at op 1 of group 1, the peer at op 2"
                                   : "this rank is at op 2 of group 1, the peer at op 1";
    EXPECT_NE(results[r].message().find(ops), std::string::npos) << results[r];
  }
  EXPECT_GE(mismatches, 1);
}

TEST(AllreduceRing, SumFunctionServesTheModelHook) {
  auto cluster = Cluster::Create(TransportKind::kInproc, 2);
  auto results = cluster->Run([&](int r) -> absl::Status {
    Group group = *Group::Create(cluster->transport(r), {0, 1}, 1);
    std::function<absl::Status(float*, int64_t)> fn = AllReduceSumFunction(&group);
    float x[2] = {1.0f + r, 10.0f};
    absl::Status s = fn(x, 2);
    if (s.ok() && (x[0] != 3.0f || x[1] != 20.0f)) return absl::InternalError("wrong sum");
    return s;
  });
  for (const auto& s : results) EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace dtrain::comm
