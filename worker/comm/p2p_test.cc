// Pipeline streams between stages: activations forward, gradients backward, keyed by step,
// micro-batch and virtual stage, over both transports.
#include "worker/comm/p2p.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/comm/testing/cluster.h"

namespace dtrain::comm {
namespace {

using testing::Cluster;
using testing::TransportKind;

constexpr int64_t kB = 2, kT = 3, kC = 5;
const std::vector<int64_t> kShape = {kB, kT, kC};

std::vector<float> Tensor(float base) {
  std::vector<float> v(kB * kT * kC);
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + static_cast<float>(i);
  return v;
}

// A layout of `stages` pipeline stages (dp = tp = 1).
ParallelLayout Pipeline(int stages) {
  ParallelLayout layout;
  layout.set_pp(stages);
  return layout;
}

bool Contains(const absl::Status& s, absl::string_view text) {
  return s.message().find(text) != absl::string_view::npos;
}

class StageLinksTest : public ::testing::TestWithParam<TransportKind> {};

// Three stages, four micro-batches: stage p adds 1 to what it receives and passes it on;
// gradients come back the same way. Stage 0 ends with micro-batch mb's gradient 100*mb + 2.
TEST_P(StageLinksTest, ActivationsFlowForwardAndGradientsBackward) {
  auto cluster = Cluster::Create(GetParam(), 3);
  ParallelLayout layout = Pipeline(3);
  std::vector<int> wrong(3, 0);
  auto results = cluster->Run([&](int rank) -> absl::Status {
    StageLinks links(cluster->transport(rank), *PipelineNeighboursOf(layout, rank, false),
                     absl::Seconds(20));
    std::vector<SendHandle> sent;
    std::vector<std::vector<float>> keep;  // sent tensors stay alive until their Wait
    for (int mb = 0; mb < 4; ++mb) {
      std::vector<float> x = Tensor(10.0f * mb);
      if (rank > 0) {
        std::vector<float> in(x.size());
        absl::Status s = links.RecvActivation({7, mb}, kShape, absl::MakeSpan(in));
        if (!s.ok()) return s;
        wrong[rank] += in != Tensor(10.0f * mb + rank - 1);
        for (float& v : in) v += 1;
        x = in;
      }
      if (rank < 2) {
        keep.push_back(x);
        absl::StatusOr<SendHandle> h = links.SendActivation({7, mb}, kShape, keep.back());
        if (!h.ok()) return h.status();
        sent.push_back(*std::move(h));
      }
    }
    for (int mb = 3; mb >= 0; --mb) {
      std::vector<float> g = Tensor(100.0f * mb);
      if (rank < 2) {
        std::vector<float> in(g.size());
        absl::Status s = links.RecvGradient({7, mb}, kShape, absl::MakeSpan(in));
        if (!s.ok()) return s;
        wrong[rank] += in != Tensor(100.0f * mb + (2 - rank) - 1);
        for (float& v : in) v += 1;
        g = in;
      }
      if (rank > 0) {
        keep.reserve(keep.size() + 1);
        keep.push_back(g);
        absl::StatusOr<SendHandle> h = links.SendGradient({7, mb}, kShape, keep.back());
        if (!h.ok()) return h.status();
        sent.push_back(*std::move(h));
      }
      // Sends must finish before `keep` may reallocate.
      for (SendHandle& h : sent) {
        absl::Status s = links.Wait(h);
        if (!s.ok()) return s;
      }
      sent.clear();
    }
    return absl::OkStatus();
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
    EXPECT_EQ(wrong[r], 0) << "rank " << r;
  }
}

TEST_P(StageLinksTest, WrongShapeIsInvalidArgumentNamingPeerKeyAndShapes) {
  auto cluster = Cluster::Create(GetParam(), 2);
  ParallelLayout layout = Pipeline(2);
  absl::Status received;
  auto results = cluster->Run([&](int rank) -> absl::Status {
    StageLinks links(cluster->transport(rank), *PipelineNeighboursOf(layout, rank, false),
                     absl::Seconds(2));
    std::vector<float> x = Tensor(0);
    if (rank == 0) {
      absl::StatusOr<SendHandle> h = links.SendActivation({3, 1}, kShape, x);
      if (!h.ok()) return h.status();
      links.Wait(*h).IgnoreError();  // never received: withdrawn (in-process) at the deadline
      return absl::OkStatus();
    }
    std::vector<float> out(x.size());
    received = links.RecvActivation({3, 1}, {kB, kC, kT}, absl::MakeSpan(out));
    return absl::OkStatus();
  });
  EXPECT_EQ(received.code(), absl::StatusCode::kInvalidArgument) << received;
  EXPECT_TRUE(Contains(received, "activation step=3 mb=1 vs=0 from rank 0")) << received;
  EXPECT_TRUE(Contains(received, "got f32[2,3,5]")) << received;
  EXPECT_TRUE(Contains(received, "expected f32[2,5,3]")) << received;
}

TEST_P(StageLinksTest, InterleavedVirtualStagesAreKeptApart) {
  // pp = 2 with two virtual stages: rank 1's last chunk feeds rank 0's second virtual stage.
  auto cluster = Cluster::Create(GetParam(), 2);
  ParallelLayout layout = Pipeline(2);
  std::vector<int> wrong(2, 0);
  auto results = cluster->Run([&](int rank) -> absl::Status {
    StageLinks links(cluster->transport(rank), *PipelineNeighboursOf(layout, rank, true),
                     absl::Seconds(20));
    std::vector<float> a = Tensor(1), b = Tensor(2), out(a.size());
    if (rank == 0) {
      auto h = links.SendActivation({0, 0, /*virtual_stage=*/0}, kShape, a);
      if (!h.ok()) return h.status();
      absl::Status s = links.RecvActivation({0, 0, 1}, kShape, absl::MakeSpan(out));
      wrong[0] += out != b;
      absl::Status w = links.Wait(*h);
      return s.ok() ? w : s;
    }
    absl::Status s = links.RecvActivation({0, 0, 0}, kShape, absl::MakeSpan(out));
    if (!s.ok()) return s;
    wrong[1] += out != a;
    auto h = links.SendActivation({0, 0, 1}, kShape, b);
    if (!h.ok()) return h.status();
    return links.Wait(*h);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
    EXPECT_EQ(wrong[r], 0) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, StageLinksTest,
                         ::testing::Values(TransportKind::kInproc, TransportKind::kGrpc,
                                           TransportKind::kShm, TransportKind::kTlsSockets),
                         [](const ::testing::TestParamInfo<TransportKind>& info) {
                           return testing::KindName(info.param);
                         });

TEST(StageLinks, EndsOfThePipelineHaveNoNeighbourThere) {
  InprocHub hub(2);
  ParallelLayout layout = Pipeline(2);
  StageLinks first(hub.transport(0), *PipelineNeighboursOf(layout, 0, false), absl::Seconds(1));
  std::vector<float> x = Tensor(0);
  absl::Status s = first.RecvActivation({0, 0}, kShape, absl::MakeSpan(x));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(Contains(s, "no previous stage")) << s;
  EXPECT_EQ(first.SendGradient({0, 0}, kShape, x).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(StageLinks, TensorSizeMustMatchItsShape) {
  InprocHub hub(2);
  ParallelLayout layout = Pipeline(2);
  StageLinks first(hub.transport(0), *PipelineNeighboursOf(layout, 0, false), absl::Seconds(1));
  std::vector<float> x(7);
  EXPECT_EQ(first.SendActivation({0, 0}, kShape, x).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dtrain::comm
