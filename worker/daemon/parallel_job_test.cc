// Multi-worker jobs on the worker side: the placement checks, the trainer options of a rank,
// and JobRunners of one job as threads of this process, each with its own gRPC peer service on
// 127.0.0.1: they train to one worker's numbers, only the reporting rank's steps are reported,
// a cancelled rank stops at once and its peers fail naming its worker, and a peer that never
// starts fails the job at the connect deadline naming it.
#include "worker/daemon/parallel_job.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/job_paths.h"
#include "common/path_policy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "plan/job_plan.h"
#include "plan/ranks.h"
#include "worker/comm/groups.h"
#include "worker/daemon/job_runner.h"
#include "worker/daemon/planned_for_testing.h"
#include "worker/testing/text_corpus.h"

namespace dtrain::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) { return ::testing::TempDir() + "/" + name; }

std::string WriteText(const std::string& name, int bytes) {
  return dtrain::testing::WriteTextCorpus(TempPath(name), bytes);
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// A loopback port that was free a moment ago.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);
  return ntohs(addr.sin_port);
}

JobSpec Spec(const std::string& dataset, int steps) {
  JobSpec spec;
  spec.set_name("tiny");
  ModelConfig* m = spec.mutable_model();
  m->set_vocab_size(256);
  m->set_context(16);
  m->set_n_layer(2);
  m->set_n_head(2);
  m->set_n_embd(16);
  spec.set_dataset(dataset);
  spec.set_steps(steps);
  spec.set_batch_size(4);
  spec.set_seq_len(16);
  spec.mutable_optimizer()->set_max_lr(1e-2f);
  spec.mutable_optimizer()->set_warmup_steps(2);
  return spec;
}

// The coordinator's assignment of every rank: workers w0, w1, ... on free loopback ports, the
// layers split evenly over the pipeline stages. Each rank's placement is its part, as the
// coordinator sends it (coordinator/rank_assignment.h): its own entry and its peers' (plan/ranks.h
// PeerRanks) with their coordinates, worker and address; with `whole`, every rank's entry.
// `host_labels` (rank order; empty: none): the hosts of the workers, from which each rank gets
// its dp group's hosts (JobAssignment.dp_host_index) as the coordinator sends them.
std::vector<JobAssignment> Assignments(const std::string& job_id, JobSpec spec, int dp, int pp,
                                       int tp, bool whole = false,
                                       const std::vector<std::string>& host_labels = {}) {
  spec.mutable_parallel()->set_dp(dp);
  spec.mutable_parallel()->set_pp(pp);
  spec.mutable_parallel()->set_tp(tp);
  Placement placement;
  const int n_layer = spec.model().n_layer();
  // Distinct ports: a port closed after the kernel picked it may be picked again at once, and
  // the job refuses two ranks at one address.
  std::set<int> ports;
  for (int d = 0; d < dp; ++d) {
    for (int p = 0; p < pp; ++p) {
      for (int t = 0; t < tp; ++t) {
        RankAssignment* r = placement.add_ranks();
        r->set_dp_rank(d);
        r->set_pp_rank(p);
        r->set_tp_rank(t);
        r->set_worker_id(absl::StrCat("w", placement.ranks_size() - 1));
        int port = FreePort();
        while (!ports.insert(port).second) port = FreePort();
        r->set_worker_address(absl::StrCat("127.0.0.1:", port));
        r->set_first_layer(p * n_layer / pp);
        r->set_num_layers((p + 1) * n_layer / pp - p * n_layer / pp);
        if (!host_labels.empty()) r->set_host_label(host_labels[placement.ranks_size() - 1]);
      }
    }
  }
  std::vector<JobAssignment> out;
  for (const RankAssignment& r : placement.ranks()) {
    JobAssignment a;
    a.set_job_id(job_id);
    a.set_job_uid("uid-" + job_id);
    *a.mutable_spec() = spec;
    *a.mutable_rank() = r;
    const int me = RankIndex(spec.parallel(), r);
    for (int host : plan::DpHostIndex(placement, spec.parallel(), me)) a.add_dp_host_index(host);
    if (whole) {
      *a.mutable_placement() = placement;
    } else {
      const std::vector<int> peers = plan::PeerRanks(spec.parallel(), me, a.dp_host_index());
      for (int q = 0; q < placement.ranks_size(); ++q) {
        if (q == me) {
          *a.mutable_placement()->add_ranks() = r;
        } else if (std::find(peers.begin(), peers.end(), q) != peers.end()) {
          RankAssignment* peer = a.mutable_placement()->add_ranks();
          *peer = RankCoordinates(spec.parallel(), q);
          peer->set_worker_id(placement.ranks(q).worker_id());
          peer->set_worker_address(placement.ranks(q).worker_address());
        }
      }
    }
    out.push_back(PlannedIfValidForTesting(a));  // as the coordinator sends it
  }
  return out;
}

struct RankRun {
  JobOutcome outcome;
  std::vector<StepMetrics> steps;
  std::vector<bool> reported;
  std::vector<std::string> events;
  std::vector<JobLocation> locations;
  std::vector<int64_t> sealed;
  absl::Duration took;
};

// Runs `ranks` (a subset of the job's assignments) as JobRunners on threads. `after_step(rank,
// runner, step)` runs on each rank's training thread after every step.
std::vector<RankRun> RunRanks(const std::vector<JobAssignment>& ranks, const std::string& data_root,
                              std::function<void(int, JobRunner&, int64_t)> after_step = nullptr,
                              absl::Duration connect_timeout = absl::Seconds(30)) {
  std::vector<RankRun> runs(ranks.size());
  std::vector<std::unique_ptr<JobRunner>> runners(ranks.size());
  std::vector<std::unique_ptr<kernels::Backend>> backends;
  for (size_t i = 0; i < ranks.size(); ++i) {
    backends.push_back(kernels::CreateBackend("cpu", 1).value());
    JobRunnerOptions options;
    options.worker_id = ranks[i].rank().worker_id();
    options.data_root = absl::StrCat(data_root, "/", options.worker_id);
    options.allowed_roots = ResolveRoots({::testing::TempDir()}).value();
    options.connect_timeout = connect_timeout;
    options.comm_timeout = absl::Seconds(30);
    if (after_step) {
      options.after_step = [&, i](int64_t step) { after_step(i, *runners[i], step); };
    }
    JobRunner::Callbacks cb;
    RankRun* run = &runs[i];
    cb.step = [run](const StepMetrics& m, bool report) {
      run->steps.push_back(m);
      run->reported.push_back(report);
    };
    cb.event = [run](const std::string& e) { run->events.push_back(e); };
    cb.location = [run](const JobLocation& l) { run->locations.push_back(l); };
    cb.checkpoint = [run](const CheckpointSealed& c) { run->sealed.push_back(c.step()); };
    runners[i] = std::make_unique<JobRunner>(ranks[i], backends[i].get(), options, cb);
  }
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      const absl::Time start = absl::Now();
      runs[i].outcome = runners[i]->Run();
      runs[i].took = absl::Now() - start;
    });
  }
  for (std::thread& t : threads) t.join();
  runners.clear();  // shuts the transports down
  return runs;
}

std::vector<double> SingleWorkerLosses(const JobSpec& spec) {
  JobAssignment a;
  a.set_job_id("job-000100");
  a.set_job_uid("uid-ref");
  *a.mutable_spec() = spec;
  a.mutable_rank()->set_worker_id("w-ref");
  a = PlannedIfValidForTesting(a);
  // A data root per reference run: every job checkpoints by default (into
  // <data_root>/jobs/<job id>/), and a second run of the same job id there would find the
  // first one's sealed steps.
  static int runs_so_far = 0;
  std::vector<RankRun> runs = RunRanks({a}, TempPath(absl::StrCat("ref-", runs_so_far++)));
  EXPECT_TRUE(runs[0].outcome.succeeded()) << runs[0].outcome.error();
  std::vector<double> losses;
  for (const StepMetrics& m : runs[0].steps) losses.push_back(m.loss());
  return losses;
}

TEST(FindRank, FindsThisWorkerAndChecksThePlacement) {
  std::vector<JobAssignment> a = Assignments("job-1", Spec("/d", 1), 2, 2, 1);
  EXPECT_EQ(FindRank(a[2], "w2").value(), 2);
  EXPECT_EQ(plan::ReportingRank(a[0].spec().parallel()), 1);  // dp 0, last stage, tp 0

  absl::StatusOr<int> r = FindRank(a[2], "w9");
  EXPECT_THAT(r.status().message(), HasSubstr("gives no rank to worker w9"));

  JobAssignment missing = a[0];
  missing.mutable_placement()->mutable_ranks()->RemoveLast();
  EXPECT_THAT(FindRank(missing, "w0").status().message(),
              HasSubstr("lists 3 ranks but not rank 0's peer 3"));

  JobAssignment same = a[0];
  same.mutable_placement()->mutable_ranks(3)->set_worker_address(
      same.placement().ranks(1).worker_address());
  EXPECT_THAT(FindRank(same, "w0").status().message(),
              HasSubstr("ranks 1 (worker w1) and 3 (worker w3) of job job-1 (dp=2 pp=2 tp=1) "
                        "have the same peer address"));

  JobAssignment swapped = a[0];
  swapped.mutable_placement()->mutable_ranks()->SwapElements(0, 1);
  EXPECT_THAT(FindRank(swapped, "w0").status().message(), HasSubstr("out of (dp, pp, tp) order"));

  JobAssignment other = a[0];
  *other.mutable_rank() = a[1].rank();
  EXPECT_THAT(FindRank(other, "w0").status().message(),
              HasSubstr("is assigned dp0 pp1 tp0 of job job-1"));
}

TEST(FindRank, AcceptsTheRanksPartAndTheWholePlacement) {
  // 4 x 4 x 2 = 32 ranks: rank 13 (dp1 pp2 tp1) is sent itself and 6 peers, not 31.
  std::vector<JobAssignment> part = Assignments("job-1", Spec("/d", 1), 4, 4, 2);
  std::vector<JobAssignment> whole = Assignments("job-1", Spec("/d", 1), 4, 4, 2, true);
  EXPECT_EQ(part[13].placement().ranks_size(),
            1 + plan::PeerRanks(part[13].spec().parallel(), 13).size());
  EXPECT_LT(part[13].placement().ranks_size(), 9);
  EXPECT_EQ(FindRank(part[13], "w13").value(), 13);
  EXPECT_EQ(FindRank(whole[13], "w13").value(), 13);
  const Placement by_rank = PlacementByRank(part[13]);
  ASSERT_EQ(by_rank.ranks_size(), 32);
  EXPECT_EQ(by_rank.ranks(14).worker_id(), "w14");  // tp peer
  EXPECT_EQ(by_rank.ranks(0).worker_id(), "");      // not a peer: coordinates only
  EXPECT_EQ(plan::DescribeRank(by_rank, 0), "rank 0 (dp0 pp0 tp0)");
}

// Every rank the trainer's collectives and pipeline links reach (worker/comm/groups.h, in ring
// order) is one of plan::PeerRanks: the coordinator's rule for which addresses a rank is sent
// agrees with what the rank talks to, for every rank of many layouts.
TEST(PeerRanks, CoverEveryRingNeighbourOfEveryGroup) {
  for (int dp : {1, 2, 3, 5}) {
    for (int pp : {1, 2, 3, 4}) {
      for (int tp : {1, 2, 4}) {
        ParallelLayout layout;
        layout.set_dp(dp);
        layout.set_pp(pp);
        layout.set_tp(tp);
        const int n = dp * pp * tp;
        std::vector<int> world(n);
        for (int i = 0; i < n; ++i) world[i] = i;
        for (int rank = 0; rank < n; ++rank) {
          SCOPED_TRACE(absl::StrCat(dp, "x", pp, "x", tp, " rank ", rank));
          const std::vector<int> peers = plan::PeerRanks(layout, rank);
          EXPECT_LE(peers.size(), 8u);
          auto expect_peer = [&](int q, const char* why) {
            if (q < 0 || q == rank) return;
            EXPECT_TRUE(std::find(peers.begin(), peers.end(), q) != peers.end())
                << why << " neighbour " << q << " missing";
            const std::vector<int> back = plan::PeerRanks(layout, q);
            EXPECT_TRUE(std::find(back.begin(), back.end(), rank) != back.end())
                << "not symmetric with " << q;
          };
          auto ring = [&](const std::vector<int>& members, const char* why) {
            const auto at = std::find(members.begin(), members.end(), rank);
            ASSERT_NE(at, members.end());
            const int i = static_cast<int>(at - members.begin()), m = members.size();
            expect_peer(members[(i + 1) % m], why);
            expect_peer(members[(i + m - 1) % m], why);
          };
          ring(comm::TensorParallelGroup(layout, rank)->ranks, "tp");
          ring(comm::DataParallelGroup(layout, rank)->ranks, "dp");
          ring(world, "world");
          if (auto tied = *comm::TiedEmbeddingGroup(layout, rank)) ring(tied->ranks, "tied");
          for (bool interleaved : {false, true}) {
            const comm::PipelineNeighbours p =
                *comm::PipelineNeighboursOf(layout, rank, interleaved);
            expect_peer(p.prev, "pipeline");
            expect_peer(p.next, "pipeline");
          }
        }
      }
    }
  }
}

TEST(ParallelPlan, TheRankPlanIsTakenAsTheCoordinatorMadeIt) {
  JobSpec spec = Spec("/d", 7);
  spec.mutable_checkpoint()->set_dir("/ckpt");
  spec.set_micro_batch_size(1);
  spec.mutable_parallel()->set_schedule("interleaved");
  spec.mutable_parallel()->set_virtual_stages(2);
  spec.mutable_parallel()->set_zero1(true);
  spec.mutable_model()->set_n_layer(4);
  std::vector<JobAssignment> a = Assignments("job-1", spec, 1, 2, 1);
  ASSERT_TRUE(a[1].has_rank_plan());
  TrainingRun run;
  run.batch = 4;
  absl::StatusOr<parallel::ParallelTrainingOptions> o =
      ParallelPlan(a[1], 1, run, absl::Seconds(7));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->run.batch, 4);
  // The coordinator's plan of the rank as it is: its defaults (bucket_bytes) included, none
  // decided here.
  EXPECT_EQ(o->plan.SerializeAsString(), a[1].rank_plan().SerializeAsString());
  EXPECT_EQ(o->plan.rank(), 1);
  EXPECT_EQ(o->plan.layout().pp(), 2);
  EXPECT_EQ(o->plan.schedule(), SCHEDULE_INTERLEAVED);
  EXPECT_GT(o->plan.layout().bucket_bytes(), 0);
  EXPECT_EQ(o->plan.micro_batch_size(), 1);
  // Stage 1 of 2, two chunks each: model chunks 1 and 3 of four one-layer chunks.
  ASSERT_EQ(o->plan.chunks_size(), 2);
  EXPECT_EQ(o->plan.chunks(1).first_layer(), 3);
  EXPECT_EQ(o->plan.chunks(1).num_layers(), 1);
  EXPECT_EQ(o->comm_timeout, absl::Seconds(7));
}

// The coordinator's hosts of the rank's dp group become the trainer's rank_hosts (its dp group's
// entries; the flat ring without them), and a list that does not match dp is refused.
TEST(ParallelPlan, TheDpGroupsHostsPickTheAllReduce) {
  JobSpec spec = Spec("/d", 7);
  spec.mutable_checkpoint()->set_dir("/ckpt");
  spec.set_micro_batch_size(1);
  spec.mutable_model()->set_n_layer(4);
  // dp=2 pp=2, rank = 2 * dp + pp: the dp groups are {0, 2} and {1, 3}.
  std::vector<JobAssignment> a =
      Assignments("job-h", spec, 2, 2, 1, /*whole=*/false, {"x", "x", "y", "x"});
  TrainingRun run;
  run.batch = 4;
  // pp0's group is on x and y, a host each: the flat ring, no hosts sent.
  EXPECT_TRUE(a[0].dp_host_index().empty());
  absl::StatusOr<parallel::ParallelTrainingOptions> o =
      ParallelPlan(a[0], 0, run, absl::Seconds(7));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->rank_hosts.empty());
  // With dp=4 on x y x y, rank 1 (dp0 pp1) gets its group's hosts: ranks 1, 3, 5, 7.
  a = Assignments("job-h", spec, 4, 2, 1, /*whole=*/false,
                  {"x", "x", "y", "y", "x", "x", "y", "y"});
  o = ParallelPlan(a[1], 1, run, absl::Seconds(7));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_THAT(o->rank_hosts, ElementsAre("", "host 0", "", "host 1", "", "host 0", "", "host 1"));
  EXPECT_EQ(FindRank(a[1], "w1").value(), 1);
  a[1].add_dp_host_index(0);
  EXPECT_THAT(FindRank(a[1], "w1").status().message(), HasSubstr("5 dp hosts for dp=4"));
}

TEST(ParallelPlan, ARankPlanOfAnotherRankIsFailedPrecondition) {
  JobSpec spec = Spec("/d", 7);
  spec.mutable_checkpoint()->set_dir("/ckpt");
  std::vector<JobAssignment> a = Assignments("job-1", spec, 1, 2, 1);
  absl::Status s = ParallelPlan(a[0], 1, {}, absl::Seconds(7)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("the plan of job job-1 was made for rank 0 but the placement "
                                     "puts this worker at rank 1"));
}

// Several workers need one checkpoint dir: the plan's rule, so the coordinator never sends such
// a job; a worker handed its spec unplanned refuses it before training.
TEST(ParallelJobRunner, MultiWorkerJobNeedsACheckpointDir) {
  std::vector<JobAssignment> a =
      Assignments("job-2", Spec(WriteText("nockpt.txt", 4000), 3), 1, 2, 1);
  EXPECT_THAT(std::string(PlannedForTesting(a[0]).status().message()),
              HasSubstr("checkpoint.dir is required for a job on 2 workers"));
  std::vector<RankRun> runs = RunRanks(a, TempPath("nockpt"));
  for (const RankRun& r : runs) {
    EXPECT_FALSE(r.outcome.succeeded());
    EXPECT_THAT(r.outcome.error(), HasSubstr("has no rank_plan"));
    EXPECT_EQ(r.outcome.kind(), FAILURE_LOCAL);
    EXPECT_TRUE(r.steps.empty());
  }
}

// (dp, pp, tp) layouts of the tiny model against one worker.
class Layouts : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(Layouts, TrainToOneWorkersNumbersAndOnlyOneRankReports) {
  const auto [dp, pp, tp] = GetParam();
  JobSpec spec = Spec(WriteText("layouts.txt", 8000), 4);
  const std::vector<double> reference = SingleWorkerLosses(spec);
  ASSERT_EQ(reference.size(), 4u);

  const std::string dir = TempPath(absl::StrCat("layout", dp, pp, tp));
  spec.set_micro_batch_size(1);
  spec.mutable_checkpoint()->set_dir(dir + "/ckpt");
  std::vector<JobAssignment> a = Assignments(absl::StrCat("job-", dp, pp, tp), spec, dp, pp, tp);
  std::vector<RankRun> runs = RunRanks(a, dir);
  const int reporting = plan::ReportingRank(a[0].spec().parallel());
  std::vector<std::vector<int>> peers;
  for (size_t r = 0; r < runs.size(); ++r) {
    peers.push_back(plan::PeerRanks(a[0].spec().parallel(), static_cast<int>(r)));
  }
  for (size_t r = 0; r < runs.size(); ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    ASSERT_TRUE(runs[r].outcome.succeeded()) << runs[r].outcome.error();
    ASSERT_EQ(runs[r].steps.size(), reference.size());
    for (size_t s = 0; s < reference.size(); ++s) {
      EXPECT_NEAR(runs[r].steps[s].loss(), reference[s], 1e-5 * std::abs(reference[s]))
          << "step " << s + 1;
      EXPECT_EQ(runs[r].reported[s], static_cast<int>(r) == reporting);
    }
    const std::string job_dir = AbsolutePath(dir + "/ckpt/" + a[0].job_id());
    if (r == 0) {
      EXPECT_EQ(runs[r].outcome.output(), job_dir + "/model.safetensors");
      EXPECT_TRUE(Exists(runs[r].outcome.output()));
      EXPECT_EQ(runs[r].events.back(), "weights written to " + runs[r].outcome.output());
      ASSERT_EQ(runs[r].locations.size(), 1u);
      EXPECT_EQ(runs[r].locations[0].dir(), job_dir);
      EXPECT_THAT(runs[r].sealed, ElementsAre(4));  // the last step; rank 0 seals it
    } else {
      EXPECT_EQ(runs[r].outcome.output(), "");
      EXPECT_TRUE(runs[r].locations.empty());
      EXPECT_TRUE(runs[r].sealed.empty());
    }
    ASSERT_FALSE(runs[r].events.empty());
    EXPECT_THAT(runs[r].events.front(), HasSubstr(absl::StrCat("of ", runs.size(), ", layers ")));
    EXPECT_THAT(runs[r].events.front(),
                HasSubstr(absl::StrCat("connected to ", peers[r].size(),
                                       peers[r].size() == 1 ? " peer in " : " peers in ")));
  }
}

// dp=4 with ranks 0, 2 on one host and 1, 3 on another: the coordinator's hosts make every rank
// run the hierarchical all-reduce (per host, across the hosts' leaders, back), which connects
// each rank to one peer more than the flat ring (its host's other member; rank 0's dp ring
// already holds the other leader), and the job trains to one worker's losses.
TEST(ParallelJobRunner, DataParallelOnTwoHostsIsHierarchicalWithOneWorkersLosses) {
  JobSpec spec = Spec(WriteText("hosts.txt", 8000), 4);
  const std::vector<double> reference = SingleWorkerLosses(spec);
  ASSERT_EQ(reference.size(), 4u);
  const std::string dir = TempPath("two-hosts");
  spec.set_micro_batch_size(1);
  spec.mutable_checkpoint()->set_dir(dir + "/ckpt");
  std::vector<JobAssignment> a = Assignments("job-000404", spec, 4, 1, 1, /*whole=*/false,
                                             {"host-a", "host-b", "host-a", "host-b"});
  std::vector<RankRun> runs = RunRanks(a, dir);
  for (size_t r = 0; r < runs.size(); ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_THAT(a[r].dp_host_index(), ElementsAre(0, 1, 0, 1));
    ASSERT_TRUE(runs[r].outcome.succeeded()) << runs[r].outcome.error();
    ASSERT_EQ(runs[r].steps.size(), reference.size());
    for (size_t s = 0; s < reference.size(); ++s) {
      EXPECT_NEAR(runs[r].steps[s].loss(), reference[s], 1e-5 * std::abs(reference[s]))
          << "step " << s + 1;
    }
    ASSERT_FALSE(runs[r].events.empty());
    EXPECT_THAT(runs[r].events.front(), HasSubstr("connected to 3 peers in "));
  }
}

INSTANTIATE_TEST_SUITE_P(ParallelJobRunner, Layouts,
                         ::testing::Values(std::make_tuple(1, 2, 1), std::make_tuple(2, 1, 2)));

TEST(ParallelJobRunner, ACancelledRankStopsAtOnceAndItsPeerFailsNamingIt) {
  JobSpec spec = Spec(WriteText("cancel.txt", 8000), 100000);
  spec.mutable_checkpoint()->set_dir(TempPath("cancel/ckpt"));
  std::vector<JobAssignment> a = Assignments("job-3", spec, 1, 2, 1);
  std::vector<RankRun> runs =
      RunRanks(a, TempPath("cancel"), [](int rank, JobRunner& r, int64_t step) {
        if (rank == 0 && step == 2) r.Cancel("cancelled by the coordinator");
      });
  EXPECT_FALSE(runs[0].outcome.succeeded());
  EXPECT_THAT(runs[0].outcome.error(), HasSubstr("cancelled by the coordinator after step"));
  EXPECT_EQ(runs[0].outcome.kind(), FAILURE_STOPPED);
  // Rank 1 was not cancelled (in a real job the coordinator cancels it too): its peer stopped
  // (it may have said why before its transport went down), and it blames that peer.
  EXPECT_FALSE(runs[1].outcome.succeeded());
  EXPECT_THAT(runs[1].outcome.error(), HasSubstr("training failed after step "));
  EXPECT_THAT(runs[1].outcome.error(), HasSubstr("rank 0 (worker w0 at 127.0.0.1:"));
  EXPECT_EQ(runs[1].outcome.kind(), FAILURE_PEER);
  EXPECT_THAT(runs[1].outcome.suspect_workers(), ElementsAre("w0"));
  std::printf("rank 1 of a job whose rank 0 was cancelled: %s\n", runs[1].outcome.error().c_str());
  for (const RankRun& r : runs) EXPECT_LT(r.took, absl::Seconds(20)) << r.outcome.error();
}

// The coordinator asks one rank for a checkpoint (JobRunner::RequestCheckpoint, from its
// heartbeat): every rank learns it from the next step's all-reduce, so the whole job writes and
// seals that step, long before its interval.
TEST(ParallelJobRunner, ACheckpointAskedOfOneRankIsSealedByAllAtTheNextStep) {
  JobSpec spec = Spec(WriteText("asked.txt", 8000), 8);
  spec.mutable_checkpoint()->set_dir(TempPath("asked/ckpt"));
  spec.mutable_checkpoint()->set_interval_steps(100);
  std::vector<JobAssignment> a = Assignments("job-9", spec, 2, 2, 1);
  std::vector<RankRun> runs =
      RunRanks(a, TempPath("asked"), [](int rank, JobRunner& r, int64_t step) {
        if (rank == 3 && step == 3) r.RequestCheckpoint(0);
      });
  for (const RankRun& r : runs) ASSERT_TRUE(r.outcome.succeeded()) << r.outcome.error();
  EXPECT_THAT(runs[0].sealed, ElementsAre(4, 8));  // rank 0 seals: the step asked, the last
  EXPECT_TRUE(std::filesystem::exists(TempPath("asked/ckpt") + "/job-9/step_00000004"));
}

TEST(ParallelJobRunner, CancelWhileWaitingForAPeerStopsAtOnce) {
  JobSpec spec = Spec(WriteText("cancelwait.txt", 8000), 5);
  spec.mutable_checkpoint()->set_dir(TempPath("cancelwait/ckpt"));
  std::vector<JobAssignment> a = Assignments("job-4", spec, 1, 2, 1);
  auto backend = kernels::CreateBackend("cpu", 1).value();
  JobRunnerOptions options;
  options.worker_id = "w0";
  options.data_root = TempPath("cancelwait");
  options.allowed_roots = ResolveRoots({::testing::TempDir()}).value();
  options.connect_timeout = absl::Seconds(60);
  JobRunner::Callbacks cb;
  cb.step = [](const StepMetrics&, bool) {};
  cb.event = [](const std::string&) {};
  JobRunner runner(a[0], backend.get(), options, cb);
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(500));
    runner.Cancel("cancelled by the coordinator");
  });
  const absl::Time start = absl::Now();
  JobOutcome o = runner.Run();
  canceller.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(o.error(), "cancelled by the coordinator before the first step");
}

TEST(ParallelJobRunner, APeerThatNeverStartsFailsAtTheConnectDeadlineNamingIt) {
  JobSpec spec = Spec(WriteText("nopeer.txt", 8000), 5);
  spec.mutable_checkpoint()->set_dir(TempPath("nopeer/ckpt"));
  std::vector<JobAssignment> a = Assignments("job-5", spec, 1, 2, 1);
  std::vector<RankRun> runs = RunRanks({a[0]}, TempPath("nopeer"), nullptr, absl::Seconds(1));
  EXPECT_FALSE(runs[0].outcome.succeeded());
  EXPECT_THAT(
      runs[0].outcome.error(),
      HasSubstr(absl::StrCat("cannot connect to the job's peers: peer rank 1 (worker w1 at ",
                             a[1].rank().worker_address(),
                             ", dp0 pp1 tp0) did not "
                             "accept connections within")));
  EXPECT_EQ(runs[0].outcome.kind(), FAILURE_PEER);
  EXPECT_THAT(runs[0].outcome.suspect_workers(), ElementsAre("w1"));
  EXPECT_LT(runs[0].took, absl::Seconds(5));
  std::printf("a peer that never starts: %s\n", runs[0].outcome.error().c_str());
}

}  // namespace
}  // namespace dtrain::worker
