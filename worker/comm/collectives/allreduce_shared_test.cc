// SharedAllReduce against closed forms and the ring: one thread per rank over the in-process
// transport and over gRPC with shared memory (the job's path); groups of 2, 3 and 4; sizes below,
// around and far above the member count, not divisible by it. Inputs are small integers, so
// every reduction is exact and results must equal the ring's bit for bit. Then the failures: a
// member that stops, a member killed, members that disagree, a segment that cannot be shared;
// and nothing of any segment in /dev/shm once the buffers are set up.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "worker/comm/collectives/allreduce_ring.h"
#include "worker/comm/collectives/allreduce_shared.h"
#include "worker/comm/shm/segment.h"
#include "worker/comm/testing/closed_forms.h"
#include "worker/comm/testing/cluster.h"

namespace dtrain::comm {
namespace {

using testing::Cluster;
using testing::Expected;
using testing::Input;
using testing::TransportKind;

// Segments of this process in /dev/shm ("dtrain-<pid>-...").
std::vector<std::string> OurSegments() { return SegmentsOf(getpid()); }

std::vector<int> AllRanks(int n) {
  std::vector<int> ranks(n);
  for (int i = 0; i < n; ++i) ranks[i] = i;
  return ranks;
}

class SharedAllReduceTest : public ::testing::TestWithParam<std::tuple<TransportKind, int>> {
 protected:
  void SetUp() override { cluster_ = Cluster::Create(kind(), n()); }
  TransportKind kind() const { return std::get<0>(GetParam()); }
  int n() const { return std::get<1>(GetParam()); }
  Group MakeGroup(int r, absl::Duration timeout = absl::Seconds(30)) {
    CollectiveOptions options;
    options.timeout = timeout;
    return *Group::Create(cluster_->transport(r), AllRanks(n()), /*id=*/5, options);
  }
  std::unique_ptr<Cluster> cluster_;
};

TEST_P(SharedAllReduceTest, EqualsTheClosedFormAndTheRingAtEverySizeAndOp) {
  const std::vector<int64_t> sizes = {1, 2, 3, static_cast<int64_t>(n()) + 1, 1000, 4097, 70001};
  const int64_t capacity = 70001 + 5;  // spans at offset 5 too
  std::vector<std::vector<float>> shared_results(n()), ring_results(n());
  std::vector<absl::Status> results = cluster_->Run([&](int r) -> absl::Status {
    Group group = MakeGroup(r);
    ASSIGN_OR_RETURN(std::unique_ptr<SharedAllReduce> ar,
                     SharedAllReduce::Create(&group, capacity));
    if (!ar->shared()) return absl::InternalError(absl::StrCat("not shared: ", ar->why_not()));
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMin, ReduceOp::kMax}) {
      for (int64_t count : sizes) {
        for (int64_t offset : {int64_t{0}, int64_t{5}}) {
          absl::Span<float> data = ar->buffer().subspan(offset, count);
          for (int64_t i = 0; i < count; ++i) data[i] = Input(r, i);
          RETURN_IF_ERROR(ar->Run(data, op));
          std::vector<float> ring(count);
          for (int64_t i = 0; i < count; ++i) ring[i] = Input(r, i);
          RETURN_IF_ERROR(AllReduce(group, absl::MakeSpan(ring), op));
          int64_t wrong = 0, unlike_ring = 0;
          for (int64_t i = 0; i < count; ++i) {
            wrong += data[i] != Expected(op, n(), i);
            unlike_ring += data[i] != ring[i];
          }
          if (wrong != 0 || unlike_ring != 0) {
            return absl::InternalError(absl::StrCat(ReduceOpName(op), " of ", count, " at ", offset,
                                                    ": ", wrong, " wrong, ", unlike_ring,
                                                    " unlike the ring"));
          }
        }
      }
    }
    return absl::OkStatus();
  });
  for (int r = 0; r < n(); ++r) EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
}

TEST_P(SharedAllReduceTest, ASpanOutsideTheBufferGoesThroughTheRing) {
  std::vector<absl::Status> results = cluster_->Run([&](int r) -> absl::Status {
    Group group = MakeGroup(r);
    ASSIGN_OR_RETURN(std::unique_ptr<SharedAllReduce> ar, SharedAllReduce::Create(&group, 64));
    std::vector<float> data(1000);
    for (int64_t i = 0; i < 1000; ++i) data[i] = Input(r, i);
    RETURN_IF_ERROR(ar->Run(absl::MakeSpan(data), ReduceOp::kSum));
    for (int64_t i = 0; i < 1000; ++i) {
      if (data[i] != Expected(ReduceOp::kSum, n(), i)) return absl::InternalError("wrong");
    }
    return absl::OkStatus();
  });
  for (int r = 0; r < n(); ++r) EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
}

TEST_P(SharedAllReduceTest, NothingStaysInDevShmOnceSetUpNorAfter) {
  std::vector<absl::Status> results = cluster_->Run([&](int r) -> absl::Status {
    Group group = MakeGroup(r);
    ASSIGN_OR_RETURN(std::unique_ptr<SharedAllReduce> ar, SharedAllReduce::Create(&group, 4096));
    if (!ar->shared()) return absl::InternalError(ar->why_not());
    // Set up everywhere: the name is gone while every member still maps the buffers.
    if (!OurSegments().empty()) return absl::InternalError(OurSegments().front());
    return ar->Run(ar->buffer(), ReduceOp::kSum);
  });
  for (int r = 0; r < n(); ++r) EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
  EXPECT_TRUE(OurSegments().empty());
}

TEST_P(SharedAllReduceTest, MembersThatDisagreeFailWithInvalidArgument) {
  std::vector<absl::Status> results = cluster_->Run([&](int r) -> absl::Status {
    Group group = MakeGroup(r);
    ASSIGN_OR_RETURN(std::unique_ptr<SharedAllReduce> ar, SharedAllReduce::Create(&group, 100));
    return ar->Run(ar->buffer().subspan(0, r == 1 ? 99 : 100), ReduceOp::kSum);
  });
  for (int r = 0; r < n(); ++r) {
    EXPECT_EQ(results[r].code(), absl::StatusCode::kInvalidArgument) << results[r];
    EXPECT_TRUE(absl::StrContains(results[r].message(), "member 1")) << results[r];
  }
}

// The last member never calls: the others fail at the group's deadline, naming it.
TEST_P(SharedAllReduceTest, AMemberThatStopsFailsTheOthersAtTheDeadlineNamingIt) {
  const int last = n() - 1;
  std::vector<absl::Status> results = cluster_->Run([&](int r) -> absl::Status {
    Group group = MakeGroup(r, absl::Seconds(1));
    ASSIGN_OR_RETURN(std::unique_ptr<SharedAllReduce> ar, SharedAllReduce::Create(&group, 1000));
    if (r == last) return absl::OkStatus();
    return ar->Run(ar->buffer(), ReduceOp::kSum);
  });
  for (int r = 0; r < last; ++r) {
    EXPECT_TRUE(results[r].code() == absl::StatusCode::kDeadlineExceeded ||
                results[r].code() == absl::StatusCode::kAborted)
        << results[r];
    EXPECT_TRUE(absl::StrContains(results[r].message(), absl::StrCat("member ", last)))
        << results[r];
  }
}

// A member killed while the others wait in a barrier: they fail within a second, naming it,
// well before the group's deadline.
TEST_P(SharedAllReduceTest, AKilledMemberFailsTheOthersWithinASecondNamingIt) {
  const int last = n() - 1;
  std::atomic<int> ready{0};
  absl::Time killed_at = absl::InfiniteFuture();
  std::vector<absl::Time> failed_at(n());
  std::vector<absl::Status> results = cluster_->Run([&](int r) -> absl::Status {
    Group group = MakeGroup(r, absl::Seconds(20));
    ASSIGN_OR_RETURN(std::unique_ptr<SharedAllReduce> ar, SharedAllReduce::Create(&group, 1000));
    ready.fetch_add(1);
    if (r == last) {
      while (ready.load() < n()) absl::SleepFor(absl::Milliseconds(1));
      absl::SleepFor(absl::Milliseconds(200));  // the others wait in barrier 1
      killed_at = absl::Now();
      cluster_->Kill(last);
      return absl::OkStatus();
    }
    absl::Status s = ar->Run(ar->buffer(), ReduceOp::kSum);
    failed_at[r] = absl::Now();
    return s;
  });
  const std::string dead = cluster_->transport(0)->PeerName(last);
  for (int r = 0; r < last; ++r) {
    EXPECT_TRUE(results[r].code() == absl::StatusCode::kUnavailable ||
                results[r].code() == absl::StatusCode::kAborted)
        << results[r];
    EXPECT_TRUE(absl::StrContains(results[r].message(), dead)) << results[r];
    EXPECT_LT(failed_at[r] - killed_at, absl::Seconds(1)) << "rank " << r << ": " << results[r];
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, SharedAllReduceTest,
                         ::testing::Combine(::testing::Values(TransportKind::kInproc,
                                                              TransportKind::kShm),
                                            ::testing::Values(2, 3, 4)),
                         [](const auto& info) {
                           return absl::StrCat(testing::KindName(std::get<0>(info.param)), "_",
                                               std::get<1>(info.param));
                         });

// A segment no /dev/shm has room for: nobody shares it, Run goes through the ring.
TEST(SharedAllReduce, WithoutRoomForTheSegmentRunIsTheRing) {
  auto cluster = Cluster::Create(TransportKind::kInproc, 2);
  std::vector<absl::Status> results = cluster->Run([&](int r) -> absl::Status {
    ASSIGN_OR_RETURN(Group group, Group::Create(cluster->transport(r), AllRanks(2), 5));
    ASSIGN_OR_RETURN(std::unique_ptr<SharedAllReduce> ar,
                     SharedAllReduce::Create(&group, int64_t{1} << 44));  // 64 TiB
    if (ar->shared() || ar->buffer().size() != 0 ||
        !absl::StrContains(ar->why_not(), "could not create")) {
      return absl::InternalError(absl::StrCat("shared, or why not: '", ar->why_not(), "'"));
    }
    std::vector<float> data(100, static_cast<float>(r + 1));
    RETURN_IF_ERROR(ar->Run(absl::MakeSpan(data), ReduceOp::kSum));
    return data[99] == 3.0f ? absl::OkStatus() : absl::InternalError("wrong sum");
  });
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
  EXPECT_TRUE(OurSegments().empty());
}

// A member in the middle of the ring that cannot use the segment (here: it expects another
// size; on another host: it cannot open it) makes every member use the ring, saying who.
TEST(SharedAllReduce, AMemberThatCannotMapTheSegmentMakesEveryoneUseTheRing) {
  auto cluster = Cluster::Create(TransportKind::kInproc, 3);
  std::vector<absl::Status> results = cluster->Run([&](int r) -> absl::Status {
    ASSIGN_OR_RETURN(Group group, Group::Create(cluster->transport(r), AllRanks(3), 5));
    ASSIGN_OR_RETURN(std::unique_ptr<SharedAllReduce> ar,
                     SharedAllReduce::Create(&group, r == 1 ? 200 : 100));
    if (ar->shared() || !absl::StrContains(ar->why_not(), "member 1")) {
      return absl::InternalError(absl::StrCat("shared, or why not: '", ar->why_not(), "'"));
    }
    std::vector<float> data(100, static_cast<float>(r + 1));
    RETURN_IF_ERROR(ar->Run(absl::MakeSpan(data), ReduceOp::kSum));
    return data[99] == 6.0f ? absl::OkStatus() : absl::InternalError("wrong sum");
  });
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
  EXPECT_TRUE(OurSegments().empty());
}

TEST(SharedAllReduce, AGroupOfOneSharesNothingAndRunsAtOnce) {
  auto cluster = Cluster::Create(TransportKind::kInproc, 1);
  Group group = *Group::Create(cluster->transport(0), {0}, 5);
  auto ar = SharedAllReduce::Create(&group, 10);
  ASSERT_TRUE(ar.ok()) << ar.status();
  EXPECT_FALSE((*ar)->shared());
  std::vector<float> data = {1, 2};
  EXPECT_TRUE((*ar)->Run(absl::MakeSpan(data), ReduceOp::kMean).ok());
  EXPECT_EQ(data[1], 2.0f);
}

}  // namespace
}  // namespace dtrain::comm
