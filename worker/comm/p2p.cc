#include "worker/comm/p2p.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dtrain::comm {

absl::StatusOr<SendHandle> StageLinks::SendActivation(const StageKey& k,
                                                      absl::Span<const int64_t> shape,
                                                      absl::Span<const float> data) {
  return Send(MessageKey::Activation(k.step, k.micro_batch, k.virtual_stage), neighbours_.next,
              "next", shape, data);
}

absl::Status StageLinks::RecvActivation(const StageKey& k, absl::Span<const int64_t> shape,
                                        absl::Span<float> out) {
  return Recv(MessageKey::Activation(k.step, k.micro_batch, k.virtual_stage), neighbours_.prev,
              "previous", shape, out);
}

absl::StatusOr<SendHandle> StageLinks::SendGradient(const StageKey& k,
                                                    absl::Span<const int64_t> shape,
                                                    absl::Span<const float> data) {
  return Send(MessageKey::Gradient(k.step, k.micro_batch, k.virtual_stage), neighbours_.prev,
              "previous", shape, data);
}

absl::Status StageLinks::RecvGradient(const StageKey& k, absl::Span<const int64_t> shape,
                                      absl::Span<float> out) {
  return Recv(MessageKey::Gradient(k.step, k.micro_batch, k.virtual_stage), neighbours_.next,
              "next", shape, out);
}

bool StageLinks::ActivationArrived(const StageKey& k) {
  return neighbours_.prev < 0 ||
         transport_->Arrived(neighbours_.prev,
                             MessageKey::Activation(k.step, k.micro_batch, k.virtual_stage));
}

bool StageLinks::GradientArrived(const StageKey& k) {
  return neighbours_.next < 0 ||
         transport_->Arrived(neighbours_.next,
                             MessageKey::Gradient(k.step, k.micro_batch, k.virtual_stage));
}

absl::Status StageLinks::Wait(SendHandle& sent) {
  if (sent == nullptr) return absl::OkStatus();
  absl::Status s = sent->Wait(absl::Now() + timeout_);
  sent.reset();
  return s;
}

absl::StatusOr<SendHandle> StageLinks::Send(const MessageKey& key, int peer,
                                            absl::string_view direction,
                                            absl::Span<const int64_t> shape,
                                            absl::Span<const float> data) {
  const TensorMeta meta = TensorMeta::F32(shape);
  if (peer < 0) {
    return absl::FailedPreconditionError(absl::StrCat("sending ", key.ToString(), ": rank ",
                                                      transport_->rank(), " has no ", direction,
                                                      " stage"));
  }
  if (meta.num_bytes() != static_cast<int64_t>(data.size() * sizeof(float))) {
    return absl::InvalidArgumentError(absl::StrCat("sending ", key.ToString(), " ", meta.ToString(),
                                                   " from ", data.size(), " floats"));
  }
  return transport_->StartSend(peer, key, meta, AsBytes(data), absl::Now() + timeout_);
}

absl::Status StageLinks::Recv(const MessageKey& key, int peer, absl::string_view direction,
                              absl::Span<const int64_t> shape, absl::Span<float> out) {
  if (peer < 0) {
    return absl::FailedPreconditionError(absl::StrCat("receiving ", key.ToString(), ": rank ",
                                                      transport_->rank(), " has no ", direction,
                                                      " stage"));
  }
  return RecvInto(*transport_, peer, key, TensorMeta::F32(shape), AsWritableBytes(out),
                  absl::Now() + timeout_);
}

}  // namespace dtrain::comm
