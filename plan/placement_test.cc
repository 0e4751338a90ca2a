#include "plan/placement.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "plan/job_plan.h"

namespace dtrain::plan {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<WorkerInfo> Workers(int n, int per_host) {
  std::vector<WorkerInfo> workers;
  for (int i = 0; i < n; ++i) {
    WorkerInfo& w = workers.emplace_back();
    w.set_worker_id(absl::StrFormat("w%04d", i));
    w.set_address(absl::StrFormat("10.0.%d.%d:7071", i / per_host, i % per_host));
    w.set_host_label(absl::StrFormat("host%03d", i / per_host));
  }
  return workers;
}

JobSpec RawSpec(int n_layer, int dp, int pp, int tp, int vocab = 256, int n_embd = 64) {
  JobSpec spec;
  spec.mutable_model()->set_vocab_size(vocab);
  spec.mutable_model()->set_context(64);
  spec.mutable_model()->set_n_layer(n_layer);
  spec.mutable_model()->set_n_head(8);
  spec.mutable_model()->set_n_embd(n_embd);
  spec.set_dataset("/d.bin");
  spec.mutable_checkpoint()->set_dir("/ckpt");
  spec.set_steps(1);
  spec.set_batch_size(dp);
  spec.mutable_parallel()->set_dp(dp);
  spec.mutable_parallel()->set_pp(pp);
  spec.mutable_parallel()->set_tp(tp);
  return spec;
}

JobPlan Planned(const JobSpec& spec) {
  absl::StatusOr<JobPlan> plan = plan::MakeJobPlan(spec);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : JobPlan();
}

JobPlan Spec(int n_layer, int dp, int pp, int tp) { return Planned(RawSpec(n_layer, dp, pp, tp)); }

std::string HostOf(const std::vector<WorkerInfo>& workers, const std::string& id) {
  for (const WorkerInfo& w : workers) {
    if (w.worker_id() == id) return w.host_label();
  }
  return "?";
}

// --- rank placement ---

TEST(PlaceJob, SingleRankTakesTheFirstWorker) {
  std::vector<WorkerInfo> workers = Workers(3, 1);
  absl::StatusOr<PlacementResult> r = PlaceJob(Spec(4, 1, 1, 1), workers);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->placement.ranks_size(), 1);
  EXPECT_EQ(r->placement.ranks(0).worker_id(), "w0000");
  EXPECT_EQ(r->placement.ranks(0).worker_address(), "10.0.0.0:7071");
  EXPECT_EQ(r->placement.ranks(0).first_layer(), 0);
  EXPECT_EQ(r->placement.ranks(0).num_layers(), 4);
  EXPECT_EQ(r->placement.stage_costs_size(), 1);
}

TEST(PlaceJob, RanksAreOrderedDpPpTpWithStageLayers) {
  std::vector<WorkerInfo> workers = Workers(8, 8);
  absl::StatusOr<PlacementResult> r = PlaceJob(Spec(8, 2, 2, 2), workers);
  ASSERT_TRUE(r.ok()) << r.status();
  const Placement& p = r->placement;
  ASSERT_EQ(p.ranks_size(), 8);
  std::set<std::string> used;
  for (int i = 0; i < 8; ++i) {
    const RankAssignment& rank = p.ranks(i);
    EXPECT_EQ(rank.dp_rank(), i / 4);
    EXPECT_EQ(rank.pp_rank(), (i / 2) % 2);
    EXPECT_EQ(rank.tp_rank(), i % 2);
    EXPECT_EQ(rank.first_layer(), rank.pp_rank() == 0 ? 0 : 4);
    EXPECT_EQ(rank.num_layers(), 4);
    EXPECT_TRUE(rank.chunks().empty());
    used.insert(rank.worker_id());
  }
  EXPECT_EQ(used.size(), 8u);
  EXPECT_EQ(p.stage_costs_size(), 2);
}

TEST(PlaceJob, KeepsEachTensorParallelGroupOnOneHost) {
  // 3 hosts of 4 workers; tp=4 groups must each land on one host.
  std::vector<WorkerInfo> workers = Workers(12, 4);
  absl::StatusOr<PlacementResult> r = PlaceJob(Spec(4, 1, 2, 4), workers);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->split_tp_groups, 0);
  for (int g = 0; g < 2; ++g) {
    const std::string host = HostOf(workers, r->placement.ranks(g * 4).worker_id());
    for (int t = 1; t < 4; ++t) {
      EXPECT_EQ(HostOf(workers, r->placement.ranks(g * 4 + t).worker_id()), host);
    }
  }
  // Each rank records its worker's host label (what groups a dp group by host).
  for (const RankAssignment& rank : r->placement.ranks()) {
    EXPECT_EQ(rank.host_label(), HostOf(workers, rank.worker_id()));
  }
}

TEST(PlaceJob, PrefersWholeHostsOverFragments) {
  // host A has 3 idle, host B 2, host C 2: tp=2 x 2 groups fit whole on hosts; none split.
  std::vector<WorkerInfo> workers;
  for (const auto& [id, host] : std::vector<std::pair<std::string, std::string>>{
           {"a1", "A"}, {"a2", "A"}, {"a3", "A"}, {"b1", "B"}, {"b2", "B"}, {"c1", "C"}}) {
    WorkerInfo& w = workers.emplace_back();
    w.set_worker_id(id);
    w.set_host_label(host);
  }
  absl::StatusOr<PlacementResult> r = PlaceJob(Spec(4, 2, 1, 2), workers);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->split_tp_groups, 0);
  EXPECT_EQ(r->placement.ranks(0).worker_id(), "a1");
  EXPECT_EQ(r->placement.ranks(1).worker_id(), "a2");
  EXPECT_EQ(r->placement.ranks(2).worker_id(), "b1");
  EXPECT_EQ(r->placement.ranks(3).worker_id(), "b2");
}

TEST(PlaceJob, FallsBackAcrossHostsWhenNoHostHasRoom) {
  // 4 hosts of 1 worker each, tp=2: the groups must span hosts, and say so.
  std::vector<WorkerInfo> workers = Workers(4, 1);
  absl::StatusOr<PlacementResult> r = PlaceJob(Spec(4, 1, 2, 2), workers);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->split_tp_groups, 2);
  EXPECT_EQ(r->placement.ranks_size(), 4);
}

TEST(PlaceJob, IsDeterministicWhateverTheInputOrder) {
  std::vector<WorkerInfo> workers = Workers(40, 4);
  absl::StatusOr<PlacementResult> first = PlaceJob(Spec(8, 2, 2, 2), workers);
  ASSERT_TRUE(first.ok());
  std::reverse(workers.begin(), workers.end());
  std::rotate(workers.begin(), workers.begin() + 7, workers.end());
  absl::StatusOr<PlacementResult> second = PlaceJob(Spec(8, 2, 2, 2), workers);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(first->placement.SerializeAsString(), second->placement.SerializeAsString());
}

TEST(PlaceJob, TooFewWorkersSaysHowMany) {
  std::vector<WorkerInfo> workers = Workers(3, 1);
  absl::StatusOr<PlacementResult> r = PlaceJob(Spec(8, 2, 2, 2), workers);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(), HasSubstr("needs 8 workers, 3 idle"));
  EXPECT_EQ(PlaceJob(Spec(4, 1, 1, 1), {}).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(PlaceJob, DuplicateWorkerIdsAreRejected) {
  std::vector<WorkerInfo> workers = Workers(3, 1);
  workers[2].set_worker_id("w0000");
  EXPECT_EQ(PlaceJob(Spec(4, 1, 1, 1), workers).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PlaceJob, InterleavedRanksGetTheirChunks) {
  JobSpec spec = RawSpec(8, 1, 2, 1);
  spec.set_batch_size(2);  // 2 micro-batches: a multiple of the 2 stages
  spec.set_micro_batch_size(1);
  spec.mutable_parallel()->set_schedule("interleaved");
  spec.mutable_parallel()->set_virtual_stages(2);
  std::vector<WorkerInfo> workers = Workers(2, 2);
  absl::StatusOr<PlacementResult> r = PlaceJob(Planned(spec), workers);
  ASSERT_TRUE(r.ok()) << r.status();
  // 4 chunks of 2 layers: rank pp=0 holds chunks 0 and 2, pp=1 holds 1 and 3.
  const RankAssignment& r0 = r->placement.ranks(0);
  const RankAssignment& r1 = r->placement.ranks(1);
  ASSERT_EQ(r0.chunks_size(), 2);
  EXPECT_EQ(r0.chunks(0).first_layer(), 0);
  EXPECT_EQ(r0.chunks(1).first_layer(), 4);
  EXPECT_EQ(r1.chunks(0).first_layer(), 2);
  EXPECT_EQ(r1.chunks(1).first_layer(), 6);
  EXPECT_EQ(r0.first_layer(), 0);
  EXPECT_EQ(r0.num_layers(), 2);
  EXPECT_EQ(r->placement.stage_costs_size(), 2);
}

TEST(PlaceJob, Places512RanksOver1000WorkersQuickly) {
  // 8 workers per host; dp=8, pp=16, tp=4 = 512 ranks.
  std::vector<WorkerInfo> workers = Workers(1000, 8);
  JobPlan spec = Spec(32, 8, 16, 4);
  const absl::Time start = absl::Now();
  absl::StatusOr<PlacementResult> r = PlaceJob(spec, workers);
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(r.ok()) << r.status();
  std::printf("PlaceJob: 512 ranks over 1000 workers in %.3f ms\n",
              absl::ToDoubleMilliseconds(took));
  ASSERT_EQ(r->placement.ranks_size(), 512);
  EXPECT_EQ(r->split_tp_groups, 0);
  std::set<std::string> used;
  for (const RankAssignment& rank : r->placement.ranks()) used.insert(rank.worker_id());
  EXPECT_EQ(used.size(), 512u);
  for (int g = 0; g < 128; ++g) {
    const std::string host = HostOf(workers, r->placement.ranks(g * 4).worker_id());
    for (int t = 1; t < 4; ++t) {
      EXPECT_EQ(HostOf(workers, r->placement.ranks(g * 4 + t).worker_id()), host);
    }
  }
  EXPECT_LT(took, absl::Milliseconds(100));
}

// --- memory ---

void SetMemory(std::vector<WorkerInfo>& workers, std::vector<int64_t> bytes) {
  for (size_t i = 0; i < bytes.size(); ++i) workers[i].mutable_device()->set_memory_bytes(bytes[i]);
}

TEST(PlaceJob, NeverPutsARankOnAWorkerTooSmallForIt) {
  const JobPlan plan = Spec(4, 1, 2, 1);
  const int64_t need0 = plan.stages(0).memory().total(), need1 = plan.stages(1).memory().total();
  ASSERT_GT(need0, 0);
  ASSERT_GT(need1, 0);
  // w0000 is too small for either stage, w0001 fits only the smaller, w0002 fits both.
  std::vector<WorkerInfo> workers = Workers(3, 3);
  SetMemory(workers, {std::min(need0, need1) - 1, std::min(need0, need1), std::max(need0, need1)});
  absl::StatusOr<PlacementResult> r = PlaceJob(plan, workers);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const RankAssignment& rank : r->placement.ranks()) {
    EXPECT_NE(rank.worker_id(), "w0000");
  }
  const int bigger = need0 >= need1 ? 0 : 1;
  EXPECT_EQ(r->placement.ranks(bigger).worker_id(), "w0002");
  EXPECT_EQ(r->placement.ranks(bigger).host_label(), "host000");  // placed by size: labelled too
}

TEST(PlaceJob, ARankThatFitsNowhereIsResourceExhaustedNamingItsNeed) {
  const JobPlan plan = Spec(4, 1, 1, 1);
  std::vector<WorkerInfo> workers = Workers(2, 1);
  SetMemory(workers, {1024, 2048});
  absl::StatusOr<PlacementResult> r = PlaceJob(plan, workers);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(),
              HasSubstr(absl::StrCat("rank 0 (dp0 pp0 tp0) needs ",
                                     plan::FormatBytes(plan.stages(0).memory().total()),
                                     "; the largest idle worker has 2.0 KiB (w0001)")));
}

TEST(PlaceJob, UnknownMemoryFitsAnything) {
  std::vector<WorkerInfo> workers = Workers(1, 1);  // memory_bytes 0: not reported
  EXPECT_TRUE(PlaceJob(Spec(4, 1, 1, 1), workers).ok());
}

// --- candidates (the coordinator's registry: shared workers, memory given beside them) ---

std::vector<Candidate> Candidates(const std::vector<WorkerInfo>& workers) {
  std::vector<Candidate> out;
  std::map<std::string, uint32_t> hosts;
  for (const WorkerInfo& w : workers) {
    const uint32_t host = hosts.try_emplace(w.host_label(), hosts.size()).first->second;
    out.push_back(
        Candidate{std::make_shared<const WorkerInfo>(w), w.device().memory_bytes(), host});
  }
  return out;
}

TEST(PlaceJob, CandidatesArePlacedAsTheWorkersThemselves) {
  // 7 per host, so that whole hosts, leftovers and split groups all occur.
  std::vector<WorkerInfo> workers = Workers(90, 7);
  std::reverse(workers.begin(), workers.end());
  const JobPlan plan = Spec(8, 5, 4, 4);
  absl::StatusOr<PlacementResult> from_workers = PlaceJob(plan, workers);
  absl::StatusOr<PlacementResult> from_candidates = PlaceJobOnCandidates(plan, Candidates(workers));
  ASSERT_TRUE(from_workers.ok()) << from_workers.status();
  ASSERT_TRUE(from_candidates.ok()) << from_candidates.status();
  EXPECT_EQ(from_candidates->placement.SerializeAsString(),
            from_workers->placement.SerializeAsString());
  EXPECT_EQ(from_candidates->split_tp_groups, from_workers->split_tp_groups);
  EXPECT_GT(from_workers->split_tp_groups, 0);
}

TEST(PlaceJob, ACandidatesMemoryIsWhatItMayBeGivenNotWhatItOffered) {
  const JobPlan plan = Spec(4, 1, 1, 1);
  const int64_t need = plan.stages(0).memory().total();
  std::vector<WorkerInfo> workers = Workers(2, 1);
  SetMemory(workers, {4 * need, 4 * need});  // both offered room
  std::vector<Candidate> idle = Candidates(workers);
  idle[0].memory_bytes = need - 1;  // w0000's host has less left: its share is too small
  absl::StatusOr<PlacementResult> r = PlaceJobOnCandidates(plan, idle);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->placement.ranks(0).worker_id(), "w0001");
  idle[1].memory_bytes = need - 1;
  EXPECT_EQ(PlaceJobOnCandidates(plan, idle).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(PlaceJob, CandidatesWhoseHostNumberStandsForTwoLabelsAreRefused) {
  std::vector<Candidate> idle = Candidates(Workers(4, 2));
  for (Candidate& c : idle) c.host = 0;  // host000 and host001 under one number
  absl::StatusOr<PlacementResult> r = PlaceJobOnCandidates(Spec(4, 1, 2, 2), idle);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("host number 0 stands for host labels"));
}

}  // namespace
}  // namespace dtrain::plan
