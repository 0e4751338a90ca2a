#include "worker/comm/transport.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace dtrain::comm {

MessageKey MessageKey::Activation(int64_t step, int32_t micro_batch, int32_t virtual_stage) {
  MessageKey key;
  key.kind = MessageKind::kActivation;
  key.step = step;
  key.micro_batch = micro_batch;
  key.virtual_stage = virtual_stage;
  return key;
}

MessageKey MessageKey::Gradient(int64_t step, int32_t micro_batch, int32_t virtual_stage) {
  MessageKey key = Activation(step, micro_batch, virtual_stage);
  key.kind = MessageKind::kGradient;
  return key;
}

MessageKey MessageKey::Collective(int32_t group, int64_t seq, int32_t part) {
  MessageKey key;
  key.kind = MessageKind::kCollective;
  key.group = group;
  key.seq = seq;
  key.part = part;
  return key;
}

std::string MessageKey::ToString() const {
  switch (kind) {
    case MessageKind::kActivation:
    case MessageKind::kGradient:
      return absl::StrCat(kind == MessageKind::kActivation ? "activation" : "gradient",
                          " step=", step, " mb=", micro_batch, " vs=", virtual_stage);
    case MessageKind::kCollective:
      return absl::StrCat("collective group=", group, " seq=", seq, " part=", part);
    case MessageKind::kAbort:
      return "abort";
  }
  return absl::StrCat("message of unknown kind ", static_cast<int>(kind));
}

bool operator==(const MessageKey& a, const MessageKey& b) {
  return a.kind == b.kind && a.step == b.step && a.micro_batch == b.micro_batch &&
         a.virtual_stage == b.virtual_stage && a.group == b.group && a.seq == b.seq &&
         a.part == b.part;
}

int64_t ElementSize(DataType dtype) { return dtype == DataType::kF32 ? 4 : 1; }

TensorMeta TensorMeta::F32(absl::Span<const int64_t> shape) {
  TensorMeta meta;
  meta.dtype = DataType::kF32;
  meta.shape.assign(shape.begin(), shape.end());
  return meta;
}

TensorMeta TensorMeta::Bytes(int64_t count) {
  TensorMeta meta;
  meta.dtype = DataType::kBytes;
  meta.shape = {count};
  return meta;
}

int64_t TensorMeta::num_bytes() const {
  int64_t n = ElementSize(dtype);
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorMeta::ToString() const {
  return absl::StrCat(dtype == DataType::kF32 ? "f32" : "bytes", "[", absl::StrJoin(shape, ","),
                      "]");
}

bool operator==(const TensorMeta& a, const TensorMeta& b) {
  return a.dtype == b.dtype && a.shape == b.shape;
}

absl::Status WatchPeers(const Transport& transport, absl::Span<const int> peers) {
  for (int peer : peers) {
    if (peer == transport.rank()) continue;
    absl::Status s = transport.PeerStatus(peer);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Send(Transport& transport, int peer, const MessageKey& key, const TensorMeta& meta,
                  absl::Span<const std::byte> data, absl::Time deadline) {
  ASSIGN_OR_RETURN(SendHandle op, transport.StartSend(peer, key, meta, data, deadline));
  return op->Wait(deadline);
}

absl::Status RecvInto(Transport& transport, int peer, const MessageKey& key,
                      const TensorMeta& expected, absl::Span<std::byte> out, absl::Time deadline,
                      const RecvOptions& options) {
  if (static_cast<int64_t>(out.size()) != expected.num_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("receiving ", key.ToString(), " from ",
                                                   transport.PeerName(peer), ": buffer of ",
                                                   out.size(), " bytes for ", expected.ToString()));
  }
  std::byte* dst = out.data();
  return transport.Recv(
      peer, key, expected,
      [dst](int64_t offset, absl::Span<const std::byte> piece) {
        if (!piece.empty()) std::memcpy(dst + offset, piece.data(), piece.size());
      },
      deadline, options);
}

void AbortJob(Transport& transport, const absl::Status& why) {
  MessageKey key;
  key.kind = MessageKind::kAbort;
  const std::string text = absl::StrCat("rank ", transport.rank(), ": ", why.ToString());
  for (int peer = 0; peer < transport.size(); ++peer) {
    if (peer != transport.rank()) transport.Post(peer, key, text).IgnoreError();
  }
}

}  // namespace dtrain::comm
