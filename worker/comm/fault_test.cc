// Faults: a rank that dies or goes silent in the middle of a step fails the collective on the
// other ranks within the group's deadline, with an error naming the peer; nothing hangs.
// In-process (InprocHub::Kill, a rank that never calls), over gRPC in one process (an abrupt
// transport shutdown), and over gRPC with a real process killed by SIGKILL.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "worker/comm/collectives/allreduce_ring.h"
#include "worker/comm/collectives/allreduce_shared.h"
#include "worker/comm/grpc/grpc_transport.h"
#include "worker/comm/shm/segment.h"
#include "worker/comm/testing/cluster.h"

extern char** environ;

namespace dtrain::comm {
namespace {

using testing::Cluster;
using testing::TransportKind;

constexpr absl::Duration kTimeout = absl::Seconds(3);
// Scheduling slack on a loaded machine, on top of the deadline.
constexpr absl::Duration kSlack = absl::Seconds(3);

bool Contains(const absl::Status& s, absl::string_view text) {
  return s.message().find(text) != absl::string_view::npos;
}

struct Outcome {
  absl::Status status;
  absl::Time failed_at;
};

// All-reduces on ranks [0, ranks) until one fails; `ready` counts iterations completed. With
// `shared`, over buffers shared by the ranks (as allreduce_benchmark --path=auto), else the ring.
Outcome LoopAllReduce(Transport* t, int n, std::atomic<int>* done_iterations, bool shared = false) {
  std::vector<int> ranks(n);
  for (int r = 0; r < n; ++r) ranks[r] = r;
  CollectiveOptions options;
  options.timeout = kTimeout;
  Group group = *Group::Create(t, ranks, 1, options);
  std::unique_ptr<SharedAllReduce> buffers;
  std::vector<float> own(1 << 18, 1.0f);
  absl::Span<float> data = absl::MakeSpan(own);
  if (shared) {
    absl::StatusOr<std::unique_ptr<SharedAllReduce>> created =
        SharedAllReduce::Create(&group, data.size());
    if (!created.ok()) return {created.status(), absl::Now()};
    if (!(*created)->shared()) return {absl::InternalError((*created)->why_not()), absl::Now()};
    buffers = *std::move(created);
    data = buffers->buffer();
    std::fill(data.begin(), data.end(), 1.0f);
  }
  while (true) {
    absl::Status s = buffers != nullptr ? buffers->Run(data, ReduceOp::kMax)
                                        : AllReduce(group, data, ReduceOp::kMax);
    if (!s.ok()) return {s, absl::Now()};
    if (t->rank() == 0) done_iterations->fetch_add(1);
  }
}

// Every survivor fails well before the deadline and names the dead rank 3 (of 4): rank 2 sends
// to it and rank 0 receives from it (Unavailable); rank 1, waiting on rank 0, gets rank 0's
// abort, which carries rank 0's error (Aborted), and passes it on.
void ExpectFailedInTimeNamingPeer(const std::vector<Outcome>& outcomes, absl::Time killed_at,
                                  absl::string_view dead_peer) {
  for (int r = 0; r < 3; ++r) {
    const Outcome& o = outcomes[r];
    EXPECT_FALSE(o.status.ok()) << "rank " << r;
    // Unavailable where a rank sees the death itself, Aborted where a neighbour's abort comes
    // first; which one depends on timing.
    EXPECT_TRUE(o.status.code() == absl::StatusCode::kUnavailable ||
                o.status.code() == absl::StatusCode::kAborted)
        << "rank " << r << ": " << o.status;
    EXPECT_LT(o.failed_at - killed_at, kTimeout) << "rank " << r << ": " << o.status;
    EXPECT_TRUE(Contains(o.status, "all-reduce max")) << o.status;
    EXPECT_TRUE(Contains(o.status, dead_peer)) << "rank " << r << ": " << o.status;
  }
}

class PeerDeathTest : public ::testing::TestWithParam<TransportKind> {};

TEST_P(PeerDeathTest, KilledRankFailsTheStepWithinTheDeadlineNamingIt) {
  auto cluster = Cluster::Create(GetParam(), 4);
  std::atomic<int> iterations{0};
  std::vector<Outcome> outcomes(4);
  absl::Time killed_at = absl::InfiniteFuture();
  cluster->Run([&](int rank) -> absl::Status {
    if (rank < 3) {
      outcomes[rank] = LoopAllReduce(cluster->transport(rank), 4, &iterations);
      return absl::OkStatus();
    }
    // Rank 3 takes part in a few all-reduces, then dies in the middle of the next one.
    std::vector<float> data(1 << 18, 1.0f);
    CollectiveOptions options;
    options.timeout = kTimeout;
    Group group = *Group::Create(cluster->transport(3), {0, 1, 2, 3}, 1, options);
    for (int i = 0; i < 3; ++i) {
      absl::Status s = AllReduce(group, absl::MakeSpan(data), ReduceOp::kMax);
      if (!s.ok()) return s;
    }
    killed_at = absl::Now();
    cluster->Kill(3);
    return absl::OkStatus();
  });
  const std::string dead = testing::IsGrpc(GetParam())
                               ? absl::StrCat("rank 3 (127.0.0.1:", cluster->grpc(3)->port(), ")")
                               : "rank 3";
  ExpectFailedInTimeNamingPeer(outcomes, killed_at, dead);
}

TEST_P(PeerDeathTest, SilentRankFailsTheStepAtTheDeadlineNamingIt) {
  auto cluster = Cluster::Create(GetParam(), 4);
  std::atomic<int> iterations{0};
  std::vector<Outcome> outcomes(4);
  const absl::Time start = absl::Now();
  cluster->Run([&](int rank) -> absl::Status {
    if (rank < 3) outcomes[rank] = LoopAllReduce(cluster->transport(rank), 4, &iterations);
    return absl::OkStatus();  // rank 3 never joins
  });
  // Rank 0 waits on rank 3 until the deadline; the others' deadlines expire at about the same
  // time, unless rank 0's abort reaches them first.
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(outcomes[r].status.code() == absl::StatusCode::kDeadlineExceeded ||
                outcomes[r].status.code() == absl::StatusCode::kAborted)
        << outcomes[r].status;
    EXPECT_LT(outcomes[r].failed_at - start, kTimeout + kSlack);
  }
  EXPECT_EQ(outcomes[0].status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(Contains(outcomes[0].status, "from rank 3")) << outcomes[0].status;
}

INSTANTIATE_TEST_SUITE_P(Kinds, PeerDeathTest,
                         ::testing::Values(TransportKind::kInproc, TransportKind::kGrpc,
                                           TransportKind::kShm, TransportKind::kTlsSockets),
                         [](const ::testing::TestParamInfo<TransportKind>& info) {
                           return testing::KindName(info.param);
                         });

// Rank 3 is another process (allreduce_benchmark --mode=loop), killed with SIGKILL while the
// four ranks all-reduce in a loop: through the shared-memory rings (--path=shm), over buffers
// the four share (--path=auto, what a job's gradient buckets use on one host), or through TLS
// data connections (--path=sockets, as between hosts).
enum class KilledPath { kRings, kSharedBuffers, kTlsSockets };

class KilledProcess : public ::testing::TestWithParam<KilledPath> {};

TEST_P(KilledProcess, FailsTheStepWithinTheDeadlineNamingIt) {
  const bool shared = GetParam() == KilledPath::kSharedBuffers;
  const bool sockets = GetParam() == KilledPath::kTlsSockets;
  const char* srcdir = std::getenv("TEST_SRCDIR");
  ASSERT_NE(srcdir, nullptr);
  const std::string binary = absl::StrCat(srcdir, "/dtrain/worker/comm/allreduce_benchmark");

  std::vector<std::unique_ptr<GrpcTransport>> transports;
  std::vector<std::string> addresses;
  for (int r = 0; r < 3; ++r) {
    GrpcTransportOptions o;
    o.rank = r;
    o.size = 4;
    o.listen_address = "127.0.0.1:0";
    o.job_id = "allreduce-benchmark";
    o.shared_memory = !sockets;
    o.data_connections = sockets ? 2 : 0;
    auto t = GrpcTransport::Start(o);
    ASSERT_TRUE(t.ok()) << t.status();
    addresses.push_back(absl::StrCat("127.0.0.1:", (*t)->port()));
    transports.push_back(*std::move(t));
  }
  // The child learns our addresses from --peers and tells us its port on stdout.
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  const std::string peers = absl::StrCat(absl::StrJoin(addresses, ","), ",127.0.0.1:0");
  std::vector<std::string> args = {
      binary,        "--rank=3",      "--peers=" + peers,    "--listen=127.0.0.1:0",
      "--mode=loop", "--timeout_s=3", "--loop_floats=262144"};
  if (sockets) {
    args.push_back("--path=sockets");
    args.push_back("--data_connections=2");
  } else {
    args.push_back(shared ? "--path=auto" : "--path=shm");
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t child;
  ASSERT_EQ(posix_spawn(&child, binary.c_str(), &actions, nullptr, argv.data(), environ), 0);
  close(out[1]);
  FILE* child_out = fdopen(out[0], "r");
  int port = 0;
  ASSERT_EQ(fscanf(child_out, "port %d", &port), 1);
  addresses.push_back(absl::StrCat("127.0.0.1:", port));
  for (auto& t : transports) ASSERT_TRUE(t->SetPeerAddresses(addresses).ok());

  std::atomic<int> iterations{0};
  std::vector<Outcome> outcomes(4);
  absl::Time killed_at = absl::InfiniteFuture();
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back(
        [&, r] { outcomes[r] = LoopAllReduce(transports[r].get(), 4, &iterations, shared); });
  }
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (iterations.load() < 5 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_GE(iterations.load(), 5) << "the four ranks never got going";
  killed_at = absl::Now();
  kill(child, SIGKILL);
  for (auto& t : threads) t.join();
  int status;
  waitpid(child, &status, 0);
  fclose(child_out);
  posix_spawn_file_actions_destroy(&actions);
  ExpectFailedInTimeNamingPeer(outcomes, killed_at, addresses[3]);
  for (int r = 0; r < 3; ++r) {
    printf("rank %d after %.3f s: %s\n", r,
           absl::ToDoubleSeconds(outcomes[r].failed_at - killed_at),
           outcomes[r].status.ToString().c_str());
    // The bound for a peer killed mid-transfer.
    EXPECT_LT(outcomes[r].failed_at - killed_at, absl::Seconds(1)) << "rank " << r;
  }
  // The data went through shared memory (one host) or the TLS data connections, and a peer
  // killed with SIGKILL leaves no segment behind: every segment's name was unlinked once its
  // peers had mapped it.
  EXPECT_EQ(transports[2]->data_path(3), sockets ? DataPath::kTlsSockets : DataPath::kSharedMemory);
  for (auto& t : transports) t->Shutdown(absl::Seconds(1));
  for (pid_t pid : {child, getpid()}) EXPECT_EQ(SegmentsOf(pid), std::vector<std::string>{});
}

INSTANTIATE_TEST_SUITE_P(Paths, KilledProcess,
                         ::testing::Values(KilledPath::kRings, KilledPath::kSharedBuffers,
                                           KilledPath::kTlsSockets),
                         [](const ::testing::TestParamInfo<KilledPath>& info) {
                           switch (info.param) {
                             case KilledPath::kRings:
                               return "Rings";
                             case KilledPath::kSharedBuffers:
                               return "SharedBuffers";
                             case KilledPath::kTlsSockets:
                               return "TlsSockets";
                           }
                           return "Unknown";
                         });

}  // namespace
}  // namespace dtrain::comm
