// Pipeline streams: activations (forward, to the next stage) and their gradients (backward, to
// the previous stage), one message per (step, micro-batch, virtual stage). The key and the
// shape travel with the tensor; a receive that finds another shape under its key fails with
// InvalidArgument naming both, and one whose key never comes fails at its deadline listing
// what the peer sent instead. Nothing is reinterpreted.
//
//   StageLinks links(&transport, neighbours, absl::Seconds(60));
//   // stage p, forward of micro-batch mb:
//   RETURN_IF_ERROR(links.RecvActivation({step, mb}, {B, T, C}, input));
//   ... compute ...
//   ASSIGN_OR_RETURN(SendHandle sent, links.SendActivation({step, mb}, {B, T, C}, output));
//   ... keep `output` unchanged until:
//   RETURN_IF_ERROR(links.Wait(sent));
//
// Sends are asynchronous and zero-copy (transport.h): the tensor must stay unchanged until
// Wait. Receives copy straight from the received frames into `out`, as they arrive.
// `virtual_stage` is the receiving rank's virtual stage (0 without interleaving).
#ifndef DTRAIN_WORKER_COMM_P2P_H_
#define DTRAIN_WORKER_COMM_P2P_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/comm/groups.h"
#include "worker/comm/transport.h"

namespace dtrain::comm {

struct StageKey {
  int64_t step = 0;
  int32_t micro_batch = 0;
  int32_t virtual_stage = 0;
};

class StageLinks {
 public:
  // Every send, receive and wait gets `timeout` from its start.
  StageLinks(Transport* transport, PipelineNeighbours neighbours, absl::Duration timeout)
      : transport_(transport), neighbours_(neighbours), timeout_(timeout) {}

  // Forward: to the next stage / from the previous one.
  absl::StatusOr<SendHandle> SendActivation(const StageKey& key, absl::Span<const int64_t> shape,
                                            absl::Span<const float> data);
  absl::Status RecvActivation(const StageKey& key, absl::Span<const int64_t> shape,
                              absl::Span<float> out);
  // Backward: to the previous stage / from the next one.
  absl::StatusOr<SendHandle> SendGradient(const StageKey& key, absl::Span<const int64_t> shape,
                                          absl::Span<const float> data);
  absl::Status RecvGradient(const StageKey& key, absl::Span<const int64_t> shape,
                            absl::Span<float> out);

  absl::Status Wait(SendHandle& sent);

  // Whether RecvActivation / RecvGradient of `key` would start at once (Transport::Arrived):
  // lets a stage run other ready work instead of blocking. True without such a neighbour (the
  // receive fails at once).
  bool ActivationArrived(const StageKey& key);
  bool GradientArrived(const StageKey& key);

  // Where the stage's actions are recorded (Transport::recorder()); may be null.
  FlightRecorder* recorder() const { return transport_->recorder(); }

 private:
  absl::StatusOr<SendHandle> Send(const MessageKey& key, int peer, absl::string_view direction,
                                  absl::Span<const int64_t> shape, absl::Span<const float> data);
  absl::Status Recv(const MessageKey& key, int peer, absl::string_view direction,
                    absl::Span<const int64_t> shape, absl::Span<float> out);

  Transport* transport_;
  PipelineNeighbours neighbours_;
  absl::Duration timeout_;
};

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_P2P_H_
