#include "worker/comm/grpc/frame_codec.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dtrain::comm {
namespace {

constexpr uint8_t kHeaderTag = (1 << 3) | 2;   // field 1, length-delimited
constexpr uint8_t kPayloadTag = (2 << 3) | 2;  // field 2, length-delimited

// Keeps a received frame's slices (and so its payload) alive while it waits in an inbox.
class SliceOwner : public FrameOwner {
 public:
  explicit SliceOwner(std::vector<grpc::Slice> slices) : slices_(std::move(slices)) {}

 private:
  std::vector<grpc::Slice> slices_;
};

void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// Reads across the slices of a received buffer.
class Cursor {
 public:
  explicit Cursor(const std::vector<grpc::Slice>& slices) : slices_(slices) { Skip(); }

  bool done() const { return index_ == slices_.size(); }

  bool ReadByte(uint8_t* b) {
    if (done()) return false;
    *b = slices_[index_].begin()[pos_++];
    Skip();
    return true;
  }

  bool ReadVarint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!ReadByte(&b)) return false;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }

  bool ReadString(uint64_t n, std::string* out) {
    out->clear();
    while (n > 0) {
      if (done()) return false;
      const grpc::Slice& s = slices_[index_];
      size_t take = std::min<uint64_t>(n, s.size() - pos_);
      out->append(reinterpret_cast<const char*>(s.begin()) + pos_, take);
      pos_ += take;
      n -= take;
      Skip();
    }
    return true;
  }

  // Views of everything left.
  int64_t Rest(absl::InlinedVector<absl::Span<const std::byte>, 4>* out) {
    int64_t n = 0;
    for (; index_ < slices_.size(); ++index_, pos_ = 0) {
      const grpc::Slice& s = slices_[index_];
      if (s.size() == pos_) continue;
      out->emplace_back(reinterpret_cast<const std::byte*>(s.begin()) + pos_, s.size() - pos_);
      n += s.size() - pos_;
    }
    return n;
  }

 private:
  void Skip() {
    while (index_ < slices_.size() && pos_ == slices_[index_].size()) {
      ++index_;
      pos_ = 0;
    }
  }

  const std::vector<grpc::Slice>& slices_;
  size_t index_ = 0;
  size_t pos_ = 0;
};

}  // namespace

PeerFrameHeader DataHeader(const MessageKey& key, int64_t offset, int64_t total,
                           const TensorMeta* meta) {
  PeerFrameHeader h;
  h.set_type(::dtrain::DATA);
  h.set_kind(static_cast<::dtrain::MessageKind>(static_cast<int>(key.kind)));
  h.set_step(key.step);
  h.set_micro_batch(key.micro_batch);
  h.set_virtual_stage(key.virtual_stage);
  h.set_group(key.group);
  h.set_seq(key.seq);
  h.set_part(key.part);
  h.set_offset(offset);
  h.set_total_bytes(total);
  if (meta != nullptr) {
    h.set_dtype(meta->dtype == comm::DataType::kF32 ? ::dtrain::F32 : ::dtrain::BYTES);
    for (int64_t d : meta->shape) h.add_shape(d);
  }
  return h;
}

MessageKey KeyFromHeader(const PeerFrameHeader& h) {
  MessageKey key;
  key.kind = static_cast<comm::MessageKind>(static_cast<int>(h.kind()));
  key.step = h.step();
  key.micro_batch = h.micro_batch();
  key.virtual_stage = h.virtual_stage();
  key.group = h.group();
  key.seq = h.seq();
  key.part = h.part();
  return key;
}

absl::StatusOr<TensorMeta> MetaFromHeader(const PeerFrameHeader& h) {
  TensorMeta meta;
  switch (h.dtype()) {
    case ::dtrain::F32:
      meta.dtype = comm::DataType::kF32;
      break;
    case ::dtrain::BYTES:
      meta.dtype = comm::DataType::kBytes;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("frame with element type ", h.dtype()));
  }
  meta.shape.assign(h.shape().begin(), h.shape().end());
  return meta;
}

grpc::ByteBuffer EncodeFrame(const PeerFrameHeader& header, const grpc::Slice& payload) {
  std::string head;
  const std::string serialized = header.SerializeAsString();
  head.reserve(serialized.size() + 24);
  head.push_back(static_cast<char>(kHeaderTag));
  PutVarint(head, serialized.size());
  head += serialized;
  if (payload.size() == 0) {
    grpc::Slice only(head);
    return grpc::ByteBuffer(&only, 1);
  }
  head.push_back(static_cast<char>(kPayloadTag));
  PutVarint(head, payload.size());
  grpc::Slice slices[2] = {grpc::Slice(head), payload};
  return grpc::ByteBuffer(slices, 2);
}

int64_t DecodedFrame::payload_size() const {
  int64_t n = 0;
  for (const auto& p : payload) n += p.size();
  return n;
}

absl::StatusOr<DecodedFrame> DecodeFrame(grpc::ByteBuffer& buffer) {
  DecodedFrame frame;
  grpc::Status dumped = buffer.Dump(&frame.slices);
  buffer.Clear();
  if (!dumped.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("unreadable frame: ", dumped.error_message()));
  }
  Cursor cursor(frame.slices);
  uint8_t tag;
  uint64_t length;
  std::string header;
  if (!cursor.ReadByte(&tag) || tag != kHeaderTag || !cursor.ReadVarint(&length) ||
      !cursor.ReadString(length, &header) || !frame.header.ParseFromString(header)) {
    return absl::InvalidArgumentError("frame without a readable header (field 1 first)");
  }
  if (cursor.done()) return frame;
  if (!cursor.ReadByte(&tag) || tag != kPayloadTag || !cursor.ReadVarint(&length)) {
    return absl::InvalidArgumentError("frame with something other than a payload after the header");
  }
  const int64_t rest = cursor.Rest(&frame.payload);
  if (rest != static_cast<int64_t>(length)) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame payload of ", rest, " bytes, its length says ", length));
  }
  return frame;
}

absl::StatusOr<Frame> FrameOfHeader(const PeerFrameHeader& h) {
  if (h.type() != DATA) {
    return absl::InvalidArgumentError(absl::StrCat("a frame of type ", h.type(), ", not DATA"));
  }
  Frame f;
  f.key = KeyFromHeader(h);
  f.offset = h.offset();
  f.total_bytes = h.total_bytes();
  if (h.offset() == 0) {
    absl::StatusOr<TensorMeta> meta = MetaFromHeader(h);
    if (!meta.ok()) return meta.status();
    f.meta = *std::move(meta);
  }
  return f;
}

absl::StatusOr<Frame> InboxFrame(DecodedFrame decoded) {
  absl::StatusOr<Frame> frame = FrameOfHeader(decoded.header);
  if (!frame.ok()) return frame.status();
  Frame& f = *frame;
  f.pieces = decoded.payload;  // views into the slices the owner keeps
  f.owner = std::make_unique<SliceOwner>(std::move(decoded.slices));
  return frame;
}

}  // namespace dtrain::comm
