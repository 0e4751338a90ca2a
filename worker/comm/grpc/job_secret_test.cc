// A peer stream is accepted only with the run's secret (GrpcTransportOptions.job_secret): two
// real gRPC transports on 127.0.0.1, as two workers of one job or of two jobs.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "worker/comm/grpc/grpc_transport.h"

namespace dtrain::comm {
namespace {

constexpr char kSecretA[] = "0123456789abcdef";  // 16 bytes, as common/peer_secret.h makes
constexpr char kSecretB[] = "fedcba9876543210";

// What the receiving rank was told about the HELLOs it refused.
struct Refusals {
  absl::Mutex mu;
  std::vector<absl::Status> seen ABSL_GUARDED_BY(mu);
};

// Rank `rank` of a 2-rank job `job_id` with `secret`, listening on a free port.
GrpcTransportOptions Options(int rank, const std::string& job_id, const std::string& secret,
                             Refusals* refusals = nullptr) {
  GrpcTransportOptions o;
  o.rank = rank;
  o.size = 2;
  o.listen_address = "127.0.0.1:0";
  o.job_id = job_id;
  o.job_secret = secret;
  if (refusals != nullptr) {
    o.on_refused = [refusals](const absl::Status& s) {
      absl::MutexLock lock(&refusals->mu);
      refusals->seen.push_back(s);
    };
  }
  return o;
}

// Starts both, tells each the other's port, and has rank 0 connect to rank 1.
absl::Status ConnectZeroToOne(const GrpcTransportOptions& zero, const GrpcTransportOptions& one) {
  auto t0 = GrpcTransport::Start(zero);
  auto t1 = GrpcTransport::Start(one);
  if (!t0.ok()) return t0.status();
  if (!t1.ok()) return t1.status();
  std::vector<std::string> addresses = {absl::StrCat("127.0.0.1:", (*t0)->port()),
                                        absl::StrCat("127.0.0.1:", (*t1)->port())};
  EXPECT_TRUE((*t0)->SetPeerAddresses(addresses).ok());
  EXPECT_TRUE((*t1)->SetPeerAddresses(addresses).ok());
  return (*t0)->Connect({1}, absl::Now() + absl::Seconds(10));
}

TEST(JobSecret, TheSameSecretConnects) {
  absl::Status s = ConnectZeroToOne(Options(0, "job-a", kSecretA), Options(1, "job-a", kSecretA));
  EXPECT_TRUE(s.ok()) << s;
}

TEST(JobSecret, ADifferentSecretIsRefusedAndBothSidesSayWhy) {
  // A worker of job A that knows its own run's secret claims job B's id and rank.
  Refusals refusals;
  absl::Status s =
      ConnectZeroToOne(Options(0, "job-b", kSecretA), Options(1, "job-b", kSecretB, &refusals));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  // The sender names the peer and says its secret was refused.
  EXPECT_TRUE(absl::StrContains(s.message(), "connecting to rank 1 (127.0.0.1:")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "refused this rank's job secret")) << s;
  // The receiver names the job and the caller's rank, never a secret.
  absl::MutexLock lock(&refusals.mu);
  ASSERT_EQ(refusals.seen.size(), 1u);
  const absl::Status& refused = refusals.seen[0];
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "from rank 0 for job 'job-b'")) << refused;
  for (const absl::Status& m : {s, refused}) {
    EXPECT_FALSE(absl::StrContains(m.message(), kSecretA)) << m;
    EXPECT_FALSE(absl::StrContains(m.message(), kSecretB)) << m;
  }
}

TEST(JobSecret, NoSecretIsRefusedByARankThatHasOne) {
  absl::Status s = ConnectZeroToOne(Options(0, "job-b", ""), Options(1, "job-b", kSecretB));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
}

TEST(JobSecret, APrefixOfTheSecretIsRefused) {
  absl::Status s = ConnectZeroToOne(Options(0, "job-b", std::string(kSecretB, 15)),
                                    Options(1, "job-b", kSecretB));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
}

TEST(JobSecret, TheSecretIsCheckedBeforeTheJobId) {
  // A stranger learns nothing about which job the rank runs.
  absl::Status s = ConnectZeroToOne(Options(0, "job-x", kSecretA), Options(1, "job-b", kSecretB));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_FALSE(absl::StrContains(s.message(), "job-b")) << s;
}

}  // namespace
}  // namespace dtrain::comm
