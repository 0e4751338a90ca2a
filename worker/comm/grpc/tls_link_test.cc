// The cross-host data path (grpc/tls_link.h): messages of every size through K TLS data
// connections (0 bytes, sizes that are no multiple of K, several parts per connection), a
// connection with a wrong or unknown pre-shared key refused, a peer killed (its error names
// it), and a send that nobody takes ending at its deadline. The transport semantics over this
// path (keys, shapes, GOODBYE, collectives) run in transport_test, collectives_test, p2p_test and
// fault_test as the kind TlsSockets.
#include "worker/comm/grpc/tls_link.h"

#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/comm/grpc/grpc_transport.h"

namespace dtrain::comm {
namespace {

struct Pair {
  std::unique_ptr<GrpcTransport> a, b;  // rank 0 sends to rank 1
};

// `receiver_connections`: rank 1's own setting (-1: the same as rank 0's); `receiver_data_port`
// its data listener's port (0: the kernel's choice).
Pair Start(int connections, std::vector<DataPathEvent>* events = nullptr, absl::Mutex* mu = nullptr,
           int receiver_connections = -1, int receiver_data_port = 0) {
  Pair pair;
  for (int r = 0; r < 2; ++r) {
    GrpcTransportOptions o;
    o.rank = r;
    o.size = 2;
    o.listen_address = "127.0.0.1:0";
    o.job_id = "tls-link-test";
    o.shared_memory = false;  // as between two hosts
    o.data_connections = r == 1 && receiver_connections >= 0 ? receiver_connections : connections;
    o.data_port = r == 1 ? receiver_data_port : 0;
    o.frame_bytes = 256 << 10;
    if (events != nullptr) {
      o.on_data_path = [events, mu](const DataPathEvent& e) {
        absl::MutexLock lock(mu);
        events->push_back(e);
      };
    }
    auto t = GrpcTransport::Start(o);
    EXPECT_TRUE(t.ok()) << t.status();
    (r == 0 ? pair.a : pair.b) = *std::move(t);
  }
  std::vector<std::string> addresses = {absl::StrCat("127.0.0.1:", pair.a->port()),
                                        absl::StrCat("127.0.0.1:", pair.b->port())};
  EXPECT_TRUE(pair.a->SetPeerAddresses(addresses).ok());
  EXPECT_TRUE(pair.b->SetPeerAddresses(addresses).ok());
  return pair;
}

std::vector<float> Pattern(int64_t n, float seed) {
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = seed + static_cast<float>(i % 1000);
  return x;
}

// Sends `n` floats from rank 0 to rank 1 and expects them to arrive whole.
void ExpectArrives(Pair& p, int64_t n, int step) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  std::vector<float> x = Pattern(n, 3.0f), out(x.size());
  ASSERT_TRUE(Send(*p.a, 1, MessageKey::Activation(step, 0), TensorMeta::F32(x.size()), AsBytes(x),
                   deadline)
                  .ok());
  ASSERT_TRUE(RecvInto(*p.b, 0, MessageKey::Activation(step, 0), TensorMeta::F32(x.size()),
                       AsWritableBytes(absl::MakeSpan(out)), deadline)
                  .ok());
  EXPECT_EQ(out, x);
}

TEST(TlsLink, MessagesOfEverySizeArriveWholeAndInOrder) {
  std::vector<DataPathEvent> events;
  absl::Mutex mu;
  Pair p = Start(3, &events, &mu);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  ASSERT_TRUE(p.a->Connect({1}, deadline).ok());
  EXPECT_EQ(p.a->data_path(1), DataPath::kTlsSockets);
  // Floats: 0 bytes, one, below a part, not a multiple of 3, several parts per connection.
  const std::vector<int64_t> sizes = {0, 1, 1000, 100001, (3 << 20) / 4 + 7, 1 << 20};
  std::vector<std::vector<float>> sent;
  std::vector<SendHandle> handles;
  for (size_t i = 0; i < sizes.size(); ++i) {
    sent.push_back(Pattern(sizes[i], static_cast<float>(i)));
    auto h = p.a->StartSend(1, MessageKey::Activation(0, static_cast<int>(i)),
                            TensorMeta::F32(sizes[i]), AsBytes(sent[i]), deadline);
    ASSERT_TRUE(h.ok()) << h.status();
    handles.push_back(*std::move(h));
  }
  // Received in the reverse order: the earlier ones wait in the inbox meanwhile.
  for (int i = static_cast<int>(sizes.size()) - 1; i >= 0; --i) {
    std::vector<float> out(sizes[i], -1.0f);
    absl::Status s = RecvInto(*p.b, 0, MessageKey::Activation(0, i), TensorMeta::F32(sizes[i]),
                              AsWritableBytes(absl::MakeSpan(out)), deadline);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(out, sent[i]) << "message " << i;
  }
  for (auto& h : handles) EXPECT_TRUE(h->Wait(deadline).ok());
  // A shape the receiver does not expect is still refused on this path.
  std::vector<float> x(10, 1.0f), y(11);
  ASSERT_TRUE(
      Send(*p.a, 1, MessageKey::Activation(1, 0), TensorMeta::F32(10), AsBytes(x), deadline).ok());
  absl::Status wrong = RecvInto(*p.b, 0, MessageKey::Activation(1, 0), TensorMeta::F32(11),
                                AsWritableBytes(absl::MakeSpan(y)), deadline);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument) << wrong;
  // A clean leave: everything sent arrives before the peer counts as gone, and not failed.
  ASSERT_TRUE(
      Send(*p.a, 1, MessageKey::Activation(2, 0), TensorMeta::F32(10), AsBytes(x), deadline).ok());
  p.a->Shutdown(absl::Seconds(5));
  std::vector<float> last(10);
  EXPECT_TRUE(RecvInto(*p.b, 0, MessageKey::Activation(2, 0), TensorMeta::F32(10),
                       AsWritableBytes(absl::MakeSpan(last)), deadline)
                  .ok());
  EXPECT_TRUE(p.b->PeerStatus(0).ok()) << p.b->PeerStatus(0);
  absl::MutexLock lock(&mu);
  int outgoing = 0, incoming = 0;
  for (const DataPathEvent& e : events) {
    EXPECT_EQ(e.path, DataPath::kTlsSockets) << e.why;
    (e.incoming ? incoming : outgoing) += 1;
  }
  EXPECT_EQ(outgoing, 1);
  EXPECT_EQ(incoming, 1);
}

// A receiver without data connections: the stream carries the data, and the sender says why.
TEST(TlsLink, FallsBackToTheStreamAndSaysWhy) {
  std::vector<DataPathEvent> events;
  absl::Mutex mu;
  Pair p = Start(2, &events, &mu, /*receiver_connections=*/0);
  ExpectArrives(p, 100000, 0);
  EXPECT_EQ(p.a->data_path(1), DataPath::kGrpc);
  absl::MutexLock lock(&mu);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_FALSE(events[0].incoming);
  EXPECT_EQ(events[0].path, DataPath::kGrpc);
  EXPECT_NE(events[0].why.find("offered no data connections"), std::string::npos) << events[0].why;
}

// --data_port: the listener binds the port it is given; a port already taken is an error naming
// it, and a transport that could not bind it sends its peers' data on the stream, saying why.
TEST(TlsLink, AFixedDataPortIsBoundAndATakenOneNamed) {
  auto first = DataListener::Start("127.0.0.1");
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = (*first)->port();
  auto taken = DataListener::Start("127.0.0.1", port);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(taken.status().message()),
              ::testing::HasSubstr(absl::StrCat("port ", port, " (--data_port)")));
  EXPECT_EQ(DataListener::Start("127.0.0.1", 65536).status().code(),
            absl::StatusCode::kInvalidArgument);

  std::vector<DataPathEvent> events;
  absl::Mutex mu;
  {
    Pair p = Start(2, &events, &mu, /*receiver_connections=*/-1, /*receiver_data_port=*/port);
    ExpectArrives(p, 1000, 0);
    EXPECT_EQ(p.a->data_path(1), DataPath::kGrpc);
    absl::MutexLock lock(&mu);
    bool said = false;
    for (const DataPathEvent& e : events) {
      said |= e.incoming && e.path == DataPath::kGrpc &&
              e.why.find(absl::StrCat("port ", port)) != std::string::npos;
    }
    EXPECT_TRUE(said) << "rank 1 did not say it could not listen on port " << port;
  }
  (*first)->Stop();
  first->reset();
  // Free again: a transport binds it, and the data goes through it.
  Pair p = Start(2, nullptr, nullptr, /*receiver_connections=*/-1, /*receiver_data_port=*/port);
  ASSERT_TRUE(p.a->Connect({1}, absl::Now() + absl::Seconds(20)).ok());
  EXPECT_EQ(p.a->data_path(1), DataPath::kTlsSockets);
}

// A listener admits only the keys it registered, and a registered identity only with its key.
TEST(TlsLink, ConnectionWithoutTheRightKeyIsRefused) {
  auto listener = DataListener::Start("127.0.0.1");
  ASSERT_TRUE(listener.ok()) << listener.status();
  std::vector<absl::Status> refused;
  absl::Mutex mu;
  (*listener)->set_on_refused([&](const absl::Status& s) {
    absl::MutexLock lock(&mu);
    refused.push_back(s);
  });
  auto right = DataPsk::New();
  ASSERT_TRUE(right.ok());
  Inbox inbox("rank 0");
  auto receiver = std::make_shared<TlsReceiver>(&inbox);
  (*listener)->Register(*right, receiver, 1);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);

  DataPsk wrong_key = *right;
  wrong_key.key[0] ^= 1;
  auto c1 = ConnectData("127.0.0.1", (*listener)->port(), wrong_key, 1, deadline);
  EXPECT_EQ(c1.status().code(), absl::StatusCode::kUnavailable) << c1.status();
  auto unknown = DataPsk::New();
  auto c2 = ConnectData("127.0.0.1", (*listener)->port(), *unknown, 1, deadline);
  EXPECT_EQ(c2.status().code(), absl::StatusCode::kUnavailable) << c2.status();
  auto c3 = ConnectData("127.0.0.1", (*listener)->port(), *right, 1, deadline);
  EXPECT_TRUE(c3.ok()) << c3.status();
  // The key admitted its one connection: a second is refused.
  auto c4 = ConnectData("127.0.0.1", (*listener)->port(), *right, 1, deadline);
  EXPECT_FALSE(c4.ok());
  (*listener)->Stop();
  absl::MutexLock lock(&mu);
  ASSERT_EQ(refused.size(), 3u);
  for (const absl::Status& s : refused) {
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  }
}

TEST(TlsLink, KilledSenderFailsTheReceiveNamingIt) {
  Pair p = Start(2);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  ASSERT_TRUE(p.a->Connect({1}, deadline).ok());
  ASSERT_EQ(p.a->data_path(1), DataPath::kTlsSockets);
  std::thread killer([&] {
    absl::SleepFor(absl::Milliseconds(200));
    p.a->Shutdown(absl::ZeroDuration());  // what peers see of a crash
  });
  std::vector<float> out(1000);
  const absl::Time start = absl::Now();
  absl::Status s = RecvInto(*p.b, 0, MessageKey::Activation(0, 0), TensorMeta::F32(1000),
                            AsWritableBytes(absl::MakeSpan(out)), deadline);
  killer.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("rank 0 (127.0.0.1:"), std::string::npos) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_FALSE(p.b->PeerStatus(0).ok());
}

TEST(TlsLink, KilledReceiverFailsTheSendNamingIt) {
  Pair p = Start(2);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  ASSERT_TRUE(p.a->Connect({1}, deadline).ok());
  p.b->Shutdown(absl::ZeroDuration());
  // Large enough to fill the sockets' buffers: the writes must fail, not wait.
  std::vector<float> x(16 << 20, 1.0f);
  absl::Status s =
      Send(*p.a, 1, MessageKey::Activation(0, 0), TensorMeta::F32(x.size()), AsBytes(x), deadline);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank 1 (127.0.0.1:"), std::string::npos) << s;
}

TEST(TlsLink, SendNobodyTakesEndsAtItsDeadline) {
  Pair p = Start(2);
  ASSERT_TRUE(p.a->Connect({1}, absl::Now() + absl::Seconds(20)).ok());
  // 256 MiB in 100 ms: more than two TLS connections carry on any machine of today.
  std::vector<float> x(64 << 20, 1.0f);
  const absl::Time start = absl::Now();
  absl::Status s = Send(*p.a, 1, MessageKey::Activation(0, 0), TensorMeta::F32(x.size()),
                        AsBytes(x), absl::Now() + absl::Milliseconds(100));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

}  // namespace
}  // namespace dtrain::comm
