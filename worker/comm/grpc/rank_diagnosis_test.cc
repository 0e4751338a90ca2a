// The peer service's Diagnose: a real GrpcTransport on 127.0.0.1 answers its flight recorder to a
// caller with the run's job id and secret, and refuses anyone else.
#include "worker/comm/grpc/rank_diagnosis.h"

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/peer.grpc.pb.h"
#include "worker/comm/grpc/grpc_transport.h"

namespace dtrain::comm {
namespace {

constexpr char kSecret[] = "0123456789abcdef";

std::unique_ptr<GrpcTransport> StartRank(const FlightRecorder* recorder) {
  GrpcTransportOptions o;
  o.rank = 1;
  o.size = 2;
  o.listen_address = "127.0.0.1:0";
  o.job_id = "job-a";
  o.job_secret = kSecret;
  o.recorder = recorder;
  absl::StatusOr<std::unique_ptr<GrpcTransport>> t = GrpcTransport::Start(o);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

grpc::Status Call(const GrpcTransport& t, const std::string& job_id, const std::string& secret,
                  RankDiagnosis* out, bool clock_only = false) {
  auto stub = PeerService::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", t.port()),
                                                       grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  DiagnoseRankRequest request;
  request.set_job_id(job_id);
  request.set_job_secret(secret);
  request.set_clock_only(clock_only);
  return stub->Diagnose(&context, request, out);
}

TEST(RankDiagnosis, TheRunAnswersItsRecorderOldestFirst) {
  FlightRecorder recorder;
  recorder.End(recorder.Begin(FlightRecord::Action(FlightOp::kForward, 120, 7, 0)), true);
  recorder.Begin(FlightRecord::Message(FlightOp::kRecv, 0, MessageKey::Gradient(120, 7), 4096));
  std::unique_ptr<GrpcTransport> t = StartRank(&recorder);
  ASSERT_NE(t, nullptr);
  RankDiagnosis d;
  grpc::Status s = Call(*t, "job-a", kSecret, &d);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(d.rank(), 1);
  EXPECT_EQ(d.recorded(), 2u);
  ASSERT_EQ(d.entries_size(), 2);
  EXPECT_EQ(d.entries(0).op(), FlightEntry::FORWARD);
  EXPECT_EQ(d.entries(0).state(), FlightEntry::DONE);
  EXPECT_EQ(d.entries(0).step(), 120);
  EXPECT_EQ(d.entries(0).micro_batch(), 7);
  const FlightEntry& recv = d.entries(1);
  EXPECT_EQ(recv.op(), FlightEntry::RECV);
  EXPECT_EQ(recv.state(), FlightEntry::STARTED);
  EXPECT_EQ(recv.kind(), GRADIENT);
  EXPECT_EQ(recv.peer(), 0);
  EXPECT_EQ(recv.bytes(), 4096);
  EXPECT_EQ(recv.end_unix_ns(), 0);
  EXPECT_GE(d.now_unix_ns(), recv.start_unix_ns());
}

// `dtrain trace`'s clock probe: the rank's time, read while the call was in flight, and no
// entries; the secret is checked as for the recorder.
TEST(RankDiagnosis, AClockProbeAnswersTheTimeOnly) {
  FlightRecorder recorder;
  recorder.End(recorder.Begin(FlightRecord::Action(FlightOp::kForward, 120, 7, 0)), true);
  std::unique_ptr<GrpcTransport> t = StartRank(&recorder);
  ASSERT_NE(t, nullptr);
  RankDiagnosis d;
  const int64_t before = absl::GetCurrentTimeNanos();
  grpc::Status s = Call(*t, "job-a", kSecret, &d, /*clock_only=*/true);
  const int64_t after = absl::GetCurrentTimeNanos();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(d.rank(), 1);
  EXPECT_EQ(d.entries_size(), 0);
  EXPECT_GE(d.now_unix_ns(), before);
  EXPECT_LE(d.now_unix_ns(), after);
  EXPECT_EQ(Call(*t, "job-a", "", &d, true).error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

TEST(RankDiagnosis, AnotherSecretIsRefusedBeforeTheJobId) {
  FlightRecorder recorder;
  std::unique_ptr<GrpcTransport> t = StartRank(&recorder);
  ASSERT_NE(t, nullptr);
  RankDiagnosis d;
  grpc::Status s = Call(*t, "job-x", "fedcba9876543210", &d);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_FALSE(absl::StrContains(s.error_message(), "job-a")) << s.error_message();
  EXPECT_FALSE(absl::StrContains(s.error_message(), kSecret)) << s.error_message();
  EXPECT_EQ(Call(*t, "job-a", "", &d).error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

TEST(RankDiagnosis, AnotherJobIsAFailedPrecondition) {
  FlightRecorder recorder;
  std::unique_ptr<GrpcTransport> t = StartRank(&recorder);
  ASSERT_NE(t, nullptr);
  RankDiagnosis d;
  grpc::Status s = Call(*t, "job-b", kSecret, &d);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
}

TEST(RankDiagnosis, NoRecorderIsUnimplemented) {
  std::unique_ptr<GrpcTransport> t = StartRank(nullptr);
  ASSERT_NE(t, nullptr);
  RankDiagnosis d;
  EXPECT_EQ(Call(*t, "job-a", kSecret, &d).error_code(), grpc::StatusCode::UNIMPLEMENTED);
}

}  // namespace
}  // namespace dtrain::comm
