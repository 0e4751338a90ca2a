// The Transport contract (transport.h), over both implementations: matching by key, shapes
// checked, frames and pieces reassembled, deadlines kept, peers named in errors.
#include <unistd.h>

#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "worker/comm/shm/segment.h"
#include "worker/comm/testing/cluster.h"
#include "worker/comm/transport.h"

namespace dtrain::comm {
namespace {

using testing::Cluster;
using testing::TransportKind;

bool Contains(const absl::Status& s, absl::string_view text) {
  return s.message().find(text) != absl::string_view::npos;
}

class TransportTest : public ::testing::TestWithParam<TransportKind> {
 protected:
  void SetUp() override { cluster_ = Cluster::Create(GetParam(), 2); }
  Transport& t(int r) { return *cluster_->transport(r); }
  static absl::Time Soon() { return absl::Now() + absl::Seconds(10); }
  std::unique_ptr<Cluster> cluster_;
};

TEST_P(TransportTest, LargeMessageArrivesIntactAcrossFramesAndPieces) {
  std::vector<float> sent(300007);
  std::iota(sent.begin(), sent.end(), 0.5f);
  std::vector<float> got(sent.size(), -1);
  const MessageKey key = MessageKey::Activation(3, 1, 0);
  const TensorMeta meta = TensorMeta::F32({300007});
  auto h = t(0).StartSend(1, key, meta, AsBytes(sent), Soon());
  ASSERT_TRUE(h.ok()) << h.status();
  absl::Status s = RecvInto(t(1), 0, key, meta, AsWritableBytes(absl::MakeSpan(got)), Soon());
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(got, sent);
  EXPECT_TRUE((*h)->Wait(Soon()).ok());
}

TEST_P(TransportTest, ZeroByteMessageIsDelivered) {
  const MessageKey key = MessageKey::Collective(1, 0, 0);
  auto h = t(0).StartSend(1, key, TensorMeta::F32(0), {}, Soon());
  ASSERT_TRUE(h.ok()) << h.status();
  absl::Status s = RecvInto(t(1), 0, key, TensorMeta::F32(0), {}, Soon());
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE((*h)->Wait(Soon()).ok());
}

TEST_P(TransportTest, MessagesMatchByKeyNotByArrivalOrder) {
  std::vector<float> a = {1, 2, 3}, b = {4, 5};
  auto ha = t(0).StartSend(1, MessageKey::Activation(1, 0), TensorMeta::F32(3), AsBytes(a), Soon());
  auto hb = t(0).StartSend(1, MessageKey::Gradient(1, 0), TensorMeta::F32(2), AsBytes(b), Soon());
  ASSERT_TRUE(ha.ok() && hb.ok());
  std::vector<float> gb(2), ga(3);
  ASSERT_TRUE(RecvInto(t(1), 0, MessageKey::Gradient(1, 0), TensorMeta::F32(2),
                       AsWritableBytes(absl::MakeSpan(gb)), Soon())
                  .ok());
  ASSERT_TRUE(RecvInto(t(1), 0, MessageKey::Activation(1, 0), TensorMeta::F32(3),
                       AsWritableBytes(absl::MakeSpan(ga)), Soon())
                  .ok());
  EXPECT_EQ(ga, a);
  EXPECT_EQ(gb, b);
  EXPECT_TRUE((*ha)->Wait(Soon()).ok());
  EXPECT_TRUE((*hb)->Wait(Soon()).ok());
}

TEST_P(TransportTest, WrongShapeIsInvalidArgumentNamingPeerKeyAndShapes) {
  std::vector<float> x(2 * 3 * 4, 1.0f);
  auto h = t(0).StartSend(1, MessageKey::Activation(7, 2), TensorMeta::F32({2, 3, 4}), AsBytes(x),
                          Soon());
  ASSERT_TRUE(h.ok());
  std::vector<float> out(2 * 3 * 4);
  absl::Status s = RecvInto(t(1), 0, MessageKey::Activation(7, 2), TensorMeta::F32({2, 4, 3}),
                            AsWritableBytes(absl::MakeSpan(out)), Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(Contains(s, "activation step=7 mb=2 vs=0")) << s;
  EXPECT_TRUE(Contains(s, "rank 0")) << s;
  EXPECT_TRUE(Contains(s, "got f32[2,3,4]")) << s;
  EXPECT_TRUE(Contains(s, "expected f32[2,4,3]")) << s;
}

TEST_P(TransportTest, WrongKeyTimesOutListingWhatThePeerSent) {
  std::vector<float> x(4, 1.0f);
  auto h = t(0).StartSend(1, MessageKey::Activation(1, 0), TensorMeta::F32(4), AsBytes(x), Soon());
  ASSERT_TRUE(h.ok());
  std::vector<float> out(4);
  const absl::Time start = absl::Now();
  absl::Status s = RecvInto(t(1), 0, MessageKey::Activation(2, 0), TensorMeta::F32(4),
                            AsWritableBytes(absl::MakeSpan(out)), start + absl::Milliseconds(300));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_TRUE(Contains(s, "activation step=2 mb=0")) << s;
  EXPECT_TRUE(Contains(s, "queued from that peer instead: activation step=1 mb=0 vs=0 f32[4]"))
      << s;
  // The message is still there for the right receive.
  EXPECT_TRUE(RecvInto(t(1), 0, MessageKey::Activation(1, 0), TensorMeta::F32(4),
                       AsWritableBytes(absl::MakeSpan(out)), Soon())
                  .ok());
}

TEST_P(TransportTest, OutOfOrderCollectiveIsInvalidArgumentAtOnce) {
  std::vector<float> x(4, 1.0f);
  auto h =
      t(0).StartSend(1, MessageKey::Collective(5, 8, 0), TensorMeta::F32(4), AsBytes(x), Soon());
  ASSERT_TRUE(h.ok());
  absl::SleepFor(absl::Milliseconds(100));  // let it arrive
  std::vector<float> out(4);
  const absl::Time start = absl::Now();
  absl::Status s =
      RecvInto(t(1), 0, MessageKey::Collective(5, 7, 0), TensorMeta::F32(4),
               AsWritableBytes(absl::MakeSpan(out)), Soon(), RecvOptions{RecvOrder::kInOrder, {}});
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(Contains(s, "sent collective group=5 seq=8 part=0 first")) << s;
}

TEST_P(TransportTest, RecvWithNothingSentFailsAtTheDeadlineNamingThePeer) {
  std::vector<float> out(4);
  const absl::Time start = absl::Now();
  absl::Status s = RecvInto(t(1), 0, MessageKey::Gradient(1, 0), TensorMeta::F32(4),
                            AsWritableBytes(absl::MakeSpan(out)), start + absl::Milliseconds(200));
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(190));
  EXPECT_LT(took, absl::Seconds(2));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_TRUE(Contains(s, "from rank 0")) << s;
  EXPECT_TRUE(Contains(s, "nothing else queued")) << s;
}

TEST_P(TransportTest, BadPeerAndSizeAreInvalidArgument) {
  std::vector<float> x(4);
  EXPECT_EQ(t(0).StartSend(2, MessageKey(), TensorMeta::F32(4), AsBytes(x), Soon()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t(0).StartSend(0, MessageKey(), TensorMeta::F32(4), AsBytes(x), Soon()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t(0).StartSend(1, MessageKey(), TensorMeta::F32(5), AsBytes(x), Soon()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(TransportTest, KilledPeerFailsReceivesWithUnavailableNamingIt) {
  // Make sure rank 0 has a stream to rank 1 (over gRPC the receiver learns of a death through it).
  std::vector<float> x(4, 1.0f);
  auto h = t(0).StartSend(1, MessageKey::Activation(0, 0), TensorMeta::F32(4), AsBytes(x), Soon());
  ASSERT_TRUE(h.ok()) << h.status();
  std::vector<float> out(4);
  ASSERT_TRUE(RecvInto(t(1), 0, MessageKey::Activation(0, 0), TensorMeta::F32(4),
                       AsWritableBytes(absl::MakeSpan(out)), Soon())
                  .ok());
  ASSERT_TRUE((*h)->Wait(Soon()).ok());
  cluster_->Kill(0);
  const absl::Time start = absl::Now();
  absl::Status s = RecvInto(t(1), 0, MessageKey::Activation(1, 0), TensorMeta::F32(4),
                            AsWritableBytes(absl::MakeSpan(out)), start + absl::Seconds(10));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(Contains(s, "rank 0")) << s;
}

TEST_P(TransportTest, ArrivedSaysWhetherAReceiveWouldStartWithoutTakingTheMessage) {
  const MessageKey key = MessageKey::Gradient(2, 5), other = MessageKey::Gradient(2, 6);
  EXPECT_FALSE(t(1).Arrived(0, key));
  std::vector<float> x = {1, 2, 3};
  auto h = t(0).StartSend(1, key, TensorMeta::F32(3), AsBytes(x), Soon());
  ASSERT_TRUE(h.ok()) << h.status();
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!t(1).Arrived(0, key) && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_TRUE(t(1).Arrived(0, key));
  EXPECT_FALSE(t(1).Arrived(0, other));  // matched by key
  std::vector<float> got(3);
  ASSERT_TRUE(
      RecvInto(t(1), 0, key, TensorMeta::F32(3), AsWritableBytes(absl::MakeSpan(got)), Soon())
          .ok());
  EXPECT_EQ(got, x);
  EXPECT_FALSE(t(1).Arrived(0, key));  // received: gone from the inbox
  EXPECT_TRUE((*h)->Wait(Soon()).ok());
  // A receive from a dead peer fails at once, so it counts as arrived (Recv says why).
  cluster_->Kill(0);
  while (!t(1).Arrived(0, other) && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_TRUE(t(1).Arrived(0, other));
}

INSTANTIATE_TEST_SUITE_P(Kinds, TransportTest,
                         ::testing::Values(TransportKind::kInproc, TransportKind::kInprocPieces,
                                           TransportKind::kGrpc, TransportKind::kShm,
                                           TransportKind::kTlsSockets),
                         [](const ::testing::TestParamInfo<TransportKind>& info) {
                           return testing::KindName(info.param);
                         });

// In-process sends are zero-copy: the send completes only when the receiver has consumed it,
// and a send nobody receives is withdrawn at its deadline.
TEST(InprocTransport, UnreceivedSendIsWithdrawnAtItsDeadline) {
  InprocHub hub(2);
  std::vector<float> x(4, 1.0f);
  auto h = hub.transport(0)->StartSend(1, MessageKey::Activation(0, 0), TensorMeta::F32(4),
                                       AsBytes(x), absl::Now());
  ASSERT_TRUE(h.ok());
  absl::Status s = (*h)->Wait(absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  std::vector<float> out(4);
  s = RecvInto(*hub.transport(1), 0, MessageKey::Activation(0, 0), TensorMeta::F32(4),
               AsWritableBytes(absl::MakeSpan(out)), absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
}

// A rank that finished its job leaves cleanly (Shutdown with a grace period): a peer still
// waiting on a third rank, watching every member as a collective does, goes on and receives;
// what the leaver sent before is received; a receive of something it never sent fails at once,
// saying it left. Rank 0 and rank 1 streamed both ways (as after a ring step): rank 1 learns of
// the leave through rank 0's half-close and through the GOODBYE on its own stream to rank 0.
// Rank 2 has a stream to rank 0 only through its GOODBYE.
class GrpcLeaveTest : public ::testing::TestWithParam<TransportKind> {};

TEST_P(GrpcLeaveTest, APeerThatLeftCleanlyFailsOnlyReceivesFromIt) {
  auto cluster = Cluster::Create(GetParam(), 3);
  Transport& t0 = *cluster->transport(0);
  Transport& t1 = *cluster->transport(1);
  Transport& t2 = *cluster->transport(2);
  const absl::Time soon = absl::Now() + absl::Seconds(10);
  std::vector<float> x(4, 1.0f), out(4);
  auto exchange = [&](Transport& from, Transport& to, int64_t step) {
    auto h = from.StartSend(to.rank(), MessageKey::Activation(step, 0), TensorMeta::F32(4),
                            AsBytes(x), soon);
    ASSERT_TRUE(h.ok()) << h.status();
    ASSERT_TRUE(RecvInto(to, from.rank(), MessageKey::Activation(step, 0), TensorMeta::F32(4),
                         AsWritableBytes(absl::MakeSpan(out)), soon)
                    .ok());
    ASSERT_TRUE((*h)->Wait(soon).ok());
  };
  exchange(t0, t1, 0);
  exchange(t1, t0, 0);
  exchange(t2, t0, 0);
  // Rank 0's last message to rank 1, sent before it leaves, received after.
  ASSERT_TRUE(Send(t0, 1, MessageKey::Activation(1, 0), TensorMeta::F32(4), AsBytes(x), soon).ok());
  cluster->grpc(0)->Shutdown(absl::Seconds(5));

  std::thread late([&] {
    absl::SleepFor(absl::Milliseconds(300));  // rank 1 watches rank 0 meanwhile
    EXPECT_TRUE(
        Send(t2, 1, MessageKey::Activation(2, 0), TensorMeta::F32(4), AsBytes(x), soon).ok());
  });
  const int members[] = {0, 1, 2};
  RecvOptions watching;
  watching.watch = members;
  absl::Status s = RecvInto(t1, 2, MessageKey::Activation(2, 0), TensorMeta::F32(4),
                            AsWritableBytes(absl::MakeSpan(out)), soon, watching);
  late.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(t1.PeerStatus(0).ok()) << t1.PeerStatus(0);
  EXPECT_TRUE(t2.PeerStatus(0).ok()) << t2.PeerStatus(0);
  s = RecvInto(t1, 0, MessageKey::Activation(1, 0), TensorMeta::F32(4),
               AsWritableBytes(absl::MakeSpan(out)), soon);
  EXPECT_TRUE(s.ok()) << s;

  const absl::Time start = absl::Now();
  s = RecvInto(t1, 0, MessageKey::Activation(3, 0), TensorMeta::F32(4),
               AsWritableBytes(absl::MakeSpan(out)), start + absl::Seconds(10));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(Contains(s, "it left the job")) << s;
  // Sending to it fails.
  EXPECT_FALSE(
      Send(t2, 0, MessageKey::Activation(4, 0), TensorMeta::F32(4), AsBytes(x), soon).ok());
}

INSTANTIATE_TEST_SUITE_P(Kinds, GrpcLeaveTest,
                         ::testing::Values(TransportKind::kGrpc, TransportKind::kShm,
                                           TransportKind::kTlsSockets),
                         [](const ::testing::TestParamInfo<TransportKind>& info) {
                           return testing::KindName(info.param);
                         });

// The names of this process's rings still in /dev/shm ("dtrain-<pid>-...").
std::vector<std::string> OurRings() { return SegmentsOf(getpid()); }

// Ranks of one host exchange data through shared memory, proved by the handshake, and the
// rings' names are gone from /dev/shm as soon as both sides mapped them.
TEST(ShmTransport, SameHostPeersUseSharedMemoryAndLeaveNothingInDevShm) {
  auto cluster = Cluster::Create(TransportKind::kShm, 2);
  GrpcTransport& t0 = *cluster->grpc(0);
  GrpcTransport& t1 = *cluster->grpc(1);
  EXPECT_EQ(t0.data_path(1), DataPath::kNone);
  std::vector<float> x(100000, 2.5f), out(x.size());
  const absl::Time soon = absl::Now() + absl::Seconds(10);
  for (int step = 0; step < 3; ++step) {
    const MessageKey key = MessageKey::Gradient(step, 0);
    auto h = t0.StartSend(1, key, TensorMeta::F32(x.size()), AsBytes(x), soon);
    ASSERT_TRUE(h.ok()) << h.status();
    ASSERT_TRUE(
        RecvInto(t1, 0, key, TensorMeta::F32(x.size()), AsWritableBytes(absl::MakeSpan(out)), soon)
            .ok());
    ASSERT_TRUE((*h)->Wait(soon).ok());
    EXPECT_EQ(out, x);
  }
  EXPECT_EQ(t0.data_path(1), DataPath::kSharedMemory);
  EXPECT_TRUE(OurRings().empty()) << OurRings().front();
}

// A receive posted before the data arrives consumes the peer's ring on its own thread: every
// piece reaches its sink there, straight from shared memory, with no reader thread between.
TEST(ShmTransport, AWaitingReceiveTakesTheRingOnItsOwnThread) {
  auto cluster = Cluster::Create(TransportKind::kShm, 2);
  GrpcTransport& t0 = *cluster->grpc(0);
  GrpcTransport& t1 = *cluster->grpc(1);
  const absl::Time soon = absl::Now() + absl::Seconds(10);
  std::vector<float> x(200000), out(x.size());  // 800 KB: many records of a 64 KiB ring
  std::iota(x.begin(), x.end(), 1.0f);
  const TensorMeta meta = TensorMeta::F32(x.size());
  // Set up the ring (the first send does the handshake).
  ASSERT_TRUE(Send(t0, 1, MessageKey::Gradient(0, 0), meta, AsBytes(x), soon).ok());
  ASSERT_TRUE(
      RecvInto(t1, 0, MessageKey::Gradient(0, 0), meta, AsWritableBytes(absl::MakeSpan(out)), soon)
          .ok());
  ASSERT_EQ(t1.data_path(0), DataPath::kNone);  // t1 sends nothing; the ring is 0 -> 1
  ASSERT_EQ(t0.data_path(1), DataPath::kSharedMemory);
  std::fill(out.begin(), out.end(), 0.0f);
  std::thread sender([&] {
    absl::SleepFor(absl::Milliseconds(50));  // the receive below is waiting by then
    EXPECT_TRUE(Send(t0, 1, MessageKey::Gradient(1, 0), meta, AsBytes(x), soon).ok());
  });
  const std::thread::id receiving = std::this_thread::get_id();
  int64_t pieces = 0, elsewhere = 0;
  std::byte* dst = reinterpret_cast<std::byte*>(out.data());
  absl::Status s = t1.Recv(
      0, MessageKey::Gradient(1, 0), meta,
      [&](int64_t offset, absl::Span<const std::byte> piece) {
        ++pieces;
        if (std::this_thread::get_id() != receiving) ++elsewhere;
        std::memcpy(dst + offset, piece.data(), piece.size());
      },
      soon, RecvOptions{});
  sender.join();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out, x);
  EXPECT_GT(pieces, 10);
  EXPECT_EQ(elsewhere, 0);
}

// Messages nobody receives yet still leave the ring (the reader thread takes it over), so
// sends of more than the ring holds complete before any receive is posted.
TEST(ShmTransport, UnreceivedMessagesLeaveTheRingSoSendsComplete) {
  auto cluster = Cluster::Create(TransportKind::kShm, 2);
  GrpcTransport& t0 = *cluster->grpc(0);
  GrpcTransport& t1 = *cluster->grpc(1);
  const absl::Time soon = absl::Now() + absl::Seconds(10);
  std::vector<float> x(100000, 3.0f), out(x.size());  // 400 KB each, the ring 64 KiB
  const TensorMeta meta = TensorMeta::F32(x.size());
  for (int mb = 0; mb < 4; ++mb) {
    ASSERT_TRUE(Send(t0, 1, MessageKey::Activation(0, mb), meta, AsBytes(x), soon).ok());
  }
  EXPECT_EQ(t0.data_path(1), DataPath::kSharedMemory);
  for (int mb = 3; mb >= 0; --mb) {
    ASSERT_TRUE(RecvInto(t1, 0, MessageKey::Activation(0, mb), meta,
                         AsWritableBytes(absl::MakeSpan(out)), soon)
                    .ok());
    EXPECT_EQ(out, x);
  }
}

// A peer that offers no ring (its shared memory is off; the same answer as a full /dev/shm)
// gets the data on the stream, and the sender says why.
TEST(ShmTransport, FallsBackToTheStreamAndSaysWhy) {
  GrpcTransportOptions a;
  a.rank = 0;
  a.size = 2;
  a.listen_address = "127.0.0.1:0";
  std::vector<DataPathEvent> events;
  absl::Mutex mu;
  a.on_data_path = [&](const DataPathEvent& e) {
    absl::MutexLock lock(&mu);
    events.push_back(e);
  };
  GrpcTransportOptions b = a;
  b.rank = 1;
  b.shared_memory = false;
  auto ta = GrpcTransport::Start(a);
  auto tb = GrpcTransport::Start(b);
  ASSERT_TRUE(ta.ok() && tb.ok());
  std::vector<std::string> addresses = {absl::StrCat("127.0.0.1:", (*ta)->port()),
                                        absl::StrCat("127.0.0.1:", (*tb)->port())};
  ASSERT_TRUE((*ta)->SetPeerAddresses(addresses).ok());
  const absl::Time soon = absl::Now() + absl::Seconds(10);
  std::vector<float> x(1000, 1.5f), out(x.size());
  ASSERT_TRUE(
      Send(**ta, 1, MessageKey::Activation(0, 0), TensorMeta::F32(x.size()), AsBytes(x), soon)
          .ok());
  ASSERT_TRUE(RecvInto(**tb, 0, MessageKey::Activation(0, 0), TensorMeta::F32(x.size()),
                       AsWritableBytes(absl::MakeSpan(out)), soon)
                  .ok());
  EXPECT_EQ(out, x);
  EXPECT_EQ((*ta)->data_path(1), DataPath::kGrpc);
  absl::MutexLock lock(&mu);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].peer, 1);
  EXPECT_FALSE(events[0].incoming);
  EXPECT_EQ(events[0].path, DataPath::kGrpc);
  EXPECT_NE(events[0].why.find("offered no shared-memory ring"), std::string::npos);
}

TEST(GrpcTransport, HelloForAnotherJobIsRefused) {
  GrpcTransportOptions a;
  a.rank = 0;
  a.size = 2;
  a.listen_address = "127.0.0.1:0";
  a.job_id = "job-a";
  GrpcTransportOptions b = a;
  b.rank = 1;
  b.job_id = "job-b";
  auto ta = GrpcTransport::Start(a);
  auto tb = GrpcTransport::Start(b);
  ASSERT_TRUE(ta.ok() && tb.ok());
  std::vector<std::string> addresses = {absl::StrCat("127.0.0.1:", (*ta)->port()),
                                        absl::StrCat("127.0.0.1:", (*tb)->port())};
  ASSERT_TRUE((*ta)->SetPeerAddresses(addresses).ok());
  absl::Status s = (*ta)->Connect({1}, absl::Now() + absl::Seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(Contains(s, "job-b")) << s;
}

TEST(GrpcTransport, UnreachablePeerFailsWithinTheDeadlineNamingIt) {
  GrpcTransportOptions a;
  a.rank = 0;
  a.peer_addresses = {"127.0.0.1:0", "127.0.0.1:1"};  // nothing listens on port 1
  a.listen_address = "127.0.0.1:0";
  auto t = GrpcTransport::Start(a);
  ASSERT_TRUE(t.ok()) << t.status();
  const absl::Time start = absl::Now();
  absl::Status s = (*t)->Connect({1}, start + absl::Milliseconds(500));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(Contains(s, "rank 1 (127.0.0.1:1)")) << s;
}

TEST(GrpcTransport, PeerNamesGivenAtStartNameThePeerInItsErrors) {
  GrpcTransportOptions a;
  a.rank = 0;
  a.peer_addresses = {"127.0.0.1:0", "127.0.0.1:1"};  // nothing listens on port 1
  a.peer_names = {"rank 0 (worker w0 at 127.0.0.1:0, dp0 pp0 tp0)",
                  "rank 1 (worker w1 at 127.0.0.1:1, dp0 pp1 tp0)"};
  a.listen_address = "127.0.0.1:0";
  auto t = GrpcTransport::Start(a);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->PeerName(1), a.peer_names[1]);
  absl::Status s = (*t)->Connect({1}, absl::Now() + absl::Milliseconds(500));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(Contains(s, "connecting to rank 1 (worker w1 at 127.0.0.1:1, dp0 pp1 tp0)")) << s;
  EXPECT_TRUE(Contains((*t)->PeerStatus(1), "rank 1 (worker w1 at")) << (*t)->PeerStatus(1);
}

TEST(GrpcTransport, PeerNamesMustNameEveryRank) {
  GrpcTransportOptions a;
  a.rank = 0;
  a.peer_addresses = {"127.0.0.1:0", "127.0.0.1:1"};
  a.peer_names = {"rank 0 (worker w0)"};
  a.listen_address = "127.0.0.1:0";
  auto t = GrpcTransport::Start(a);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(t.status(), "1 peer names for 2 ranks")) << t.status();
}

}  // namespace
}  // namespace dtrain::comm
