// Fuzzes what a worker does with the frames a peer sends on its stream (worker/comm/grpc): each
// input is a few frames, each frame's bytes split over two gRPC slices; every frame is decoded
// (DecodeFrame), turned into an inbox frame (InboxFrame: key, offset, total, meta, payload from
// the wire) and delivered to an Inbox, and each message key seen is received with the meta its
// first frame announced (when small) or a fixed one. Errors, never a crash, and a receive's sink
// only ever sees bytes inside the message it expects (it writes them into the caller's memory).
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "grpc/grpc.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "worker/comm/grpc/frame_codec.h"
#include "worker/comm/inbox.h"

namespace dtrain::comm {
namespace {

// The meta a receiver might expect: the announced one when it is small, else 4 floats.
TensorMeta Expected(const Frame& frame) {
  int64_t elements = 1;
  for (int64_t d : frame.meta.shape) {
    if (d < 0 || d > 4096 || (elements *= d) > 4096) return TensorMeta::F32(4);
  }
  return frame.meta;
}

}  // namespace
}  // namespace dtrain::comm

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  grpc_init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dtrain::comm;
  FuzzedDataProvider in(data, size);
  Inbox inbox("fuzz peer");
  std::vector<std::pair<MessageKey, TensorMeta>> receives;
  for (int n = 0; n < 8 && in.remaining_bytes() > 0; ++n) {
    const std::string bytes = in.ConsumeRandomLengthString(8192);
    const size_t cut = in.ConsumeIntegralInRange<size_t>(0, bytes.size());
    grpc::Slice slices[2] = {grpc::Slice(bytes.data(), cut),
                             grpc::Slice(bytes.data() + cut, bytes.size() - cut)};
    grpc::ByteBuffer buffer(slices, 2);
    absl::StatusOr<DecodedFrame> decoded = DecodeFrame(buffer);
    if (!decoded.ok() || decoded->header.type() != dtrain::DATA) continue;
    absl::StatusOr<Frame> frame = InboxFrame(*std::move(decoded));
    if (!frame.ok()) continue;
    if (frame->offset == 0) receives.emplace_back(frame->key, Expected(*frame));
    inbox.Deliver(*std::move(frame));
  }
  for (const auto& [key, meta] : receives) {
    const int64_t total = meta.num_bytes();
    std::vector<std::byte> dest(total);
    auto sink = [&](int64_t offset, absl::Span<const std::byte> piece) {
      if (offset < 0 || offset + static_cast<int64_t>(piece.size()) > total) {
        std::fprintf(stderr, "sink got %zu bytes at offset %lld of a %lld-byte message\n",
                     piece.size(), static_cast<long long>(offset), static_cast<long long>(total));
        std::abort();
      }
      if (!piece.empty()) std::memcpy(dest.data() + offset, piece.data(), piece.size());
    };
    (void)inbox.Receive(key, meta, sink, absl::Now(), RecvOrder::kAnyOrder);
  }
  return 0;
}
