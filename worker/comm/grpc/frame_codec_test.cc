#include "worker/comm/grpc/frame_codec.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dtrain::comm {
namespace {

std::string Flatten(const DecodedFrame& f) {
  std::string s;
  for (auto p : f.payload) s.append(reinterpret_cast<const char*>(p.data()), p.size());
  return s;
}

// The wire bytes of `buffer`, re-cut into slices of `cut` bytes, as a receiver may see them.
grpc::ByteBuffer Recut(const grpc::ByteBuffer& buffer, size_t cut) {
  std::vector<grpc::Slice> slices;
  buffer.Dump(&slices);
  std::string all;
  for (auto& s : slices) all.append(reinterpret_cast<const char*>(s.begin()), s.size());
  std::vector<grpc::Slice> recut;
  for (size_t i = 0; i < all.size(); i += cut) recut.emplace_back(all.substr(i, cut));
  return grpc::ByteBuffer(recut.data(), recut.size());
}

TEST(FrameCodec, RoundTripsHeaderAndPayloadHoweverTheBytesAreSliced) {
  const TensorMeta meta = TensorMeta::F32({3, 5});
  PeerFrameHeader header = DataHeader(MessageKey::Activation(9, 2, 1), 0, 60, &meta);
  std::string payload(60, '\0');
  for (int i = 0; i < 60; ++i) payload[i] = static_cast<char>(i * 3);
  grpc::ByteBuffer wire = EncodeFrame(header, grpc::Slice(payload));
  for (size_t cut : {1, 2, 7, 64, 1000}) {
    grpc::ByteBuffer received = Recut(wire, cut);
    absl::StatusOr<DecodedFrame> f = DecodeFrame(received);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(KeyFromHeader(f->header), MessageKey::Activation(9, 2, 1));
    EXPECT_EQ(*MetaFromHeader(f->header), meta);
    EXPECT_EQ(f->header.total_bytes(), 60);
    EXPECT_EQ(Flatten(*f), payload) << "cut " << cut;
  }
}

TEST(FrameCodec, IsTheProtobufEncodingOfPeerFrame) {
  PeerFrameHeader header = DataHeader(MessageKey::Collective(3, 4, 5), 8, 16, nullptr);
  grpc::ByteBuffer wire = EncodeFrame(header, grpc::Slice(std::string("abcdefgh")));
  std::vector<grpc::Slice> slices;
  wire.Dump(&slices);
  std::string all;
  for (auto& s : slices) all.append(reinterpret_cast<const char*>(s.begin()), s.size());
  PeerFrame frame;
  ASSERT_TRUE(frame.ParseFromString(all));
  EXPECT_EQ(frame.payload(), "abcdefgh");
  EXPECT_EQ(frame.header().seq(), 4);
  EXPECT_EQ(frame.header().offset(), 8);
}

TEST(FrameCodec, EmptyPayloadHasNoPayloadField) {
  PeerFrameHeader header;
  header.set_type(HELLO);
  grpc::ByteBuffer wire = EncodeFrame(header, grpc::Slice());
  absl::StatusOr<DecodedFrame> f = DecodeFrame(wire);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->header.type(), HELLO);
  EXPECT_EQ(f->payload_size(), 0);
}

TEST(FrameCodec, MalformedFramesAreInvalidArgument) {
  grpc::Slice garbage(std::string("\x12\x03xyz", 5));  // payload field first
  grpc::ByteBuffer wire(&garbage, 1);
  EXPECT_EQ(DecodeFrame(wire).status().code(), absl::StatusCode::kInvalidArgument);

  PeerFrameHeader header;
  grpc::ByteBuffer good = EncodeFrame(header, grpc::Slice(std::string("abcd")));
  std::vector<grpc::Slice> slices;
  good.Dump(&slices);
  std::string all;
  for (auto& s : slices) all.append(reinterpret_cast<const char*>(s.begin()), s.size());
  grpc::Slice truncated(all.substr(0, all.size() - 1));
  grpc::ByteBuffer short_wire(&truncated, 1);
  EXPECT_EQ(DecodeFrame(short_wire).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dtrain::comm
