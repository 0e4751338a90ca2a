// In-process transport: the ranks of a job as threads of one process, for fast unit tests of
// everything above the transport (collectives, pipeline streams).
//
// Sends are zero-copy, like the gRPC transport's: a frame points into the sender's buffer and
// the send completes when the receiver has consumed every frame. So a collective that
// overwrites a buffer still being sent corrupts data here too, and its tests catch it. Messages
// are cut into frames of `frame_bytes`, and each frame into pieces of `piece_bytes` when set,
// so tests can deliver floats split across pieces.
//
//   InprocHub hub(4);
//   // thread r:
//   Transport* t = hub.transport(r);
//   RETURN_IF_ERROR(Send(*t, 1, key, TensorMeta::F32(n), AsBytes(x), deadline));
//
// Kill(r) stands for a crashed rank: receives from r that find nothing queued and sends to r
// fail with Unavailable naming rank r; r's own operations fail with Cancelled.
#ifndef DTRAIN_WORKER_COMM_INPROC_INPROC_TRANSPORT_H_
#define DTRAIN_WORKER_COMM_INPROC_INPROC_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "worker/comm/inbox.h"
#include "worker/comm/transport.h"

namespace dtrain::comm {

struct InprocOptions {
  int64_t frame_bytes = 1 << 20;
  int64_t piece_bytes = 0;  // 0: one piece per frame
};

class InprocTransport;

class InprocHub {
 public:
  explicit InprocHub(int size, InprocOptions options = {});
  ~InprocHub();

  int size() const { return static_cast<int>(transports_.size()); }
  Transport* transport(int rank);
  // Rank `rank` vanishes; see above.
  void Kill(int rank);

 private:
  friend class InprocTransport;
  Inbox& inbox(int receiver, int sender) { return *inboxes_[receiver * size() + sender]; }

  InprocOptions options_;
  std::vector<std::unique_ptr<Inbox>> inboxes_;  // [receiver * size + sender]
  std::vector<std::unique_ptr<InprocTransport>> transports_;
};

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_INPROC_INPROC_TRANSPORT_H_
