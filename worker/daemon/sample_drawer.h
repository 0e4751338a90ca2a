// SampleDrawer: the samples the coordinator asks this worker to draw from a job's model
// (HeartbeatResponse.samples: `dtrain sample JOB`, the console), as AskedWork (asked_work.h):
// one at a time on a thread of their own, each drawn once, its answer kept until a heartbeat
// delivers it. On the CPU; a training job on this worker shares its cores meanwhile.
//
// A sample is drawn only from a path inside the worker's allowed roots (common/path_policy.h
// CheckPathResolved, symlinks resolved), as any path of a job; otherwise its answer says why
// (PERMISSION_DENIED) and nothing is read. It gives up at its deadline, and at its next token
// once Stop() was called.
//
//   SampleDrawer drawer(roots, {.device = "cpu", .threads = 2}, [this] { HeartbeatSoon(); });
//   drawer.Queue(ask);                                  // from a heartbeat's answer
//   for (const SampleDrawn& d : drawer.Answers()) ...   // into the next heartbeat
//   drawer.Delivered(n);                                // once it got through
#ifndef DTRAIN_WORKER_DAEMON_SAMPLE_DRAWER_H_
#define DTRAIN_WORKER_DAEMON_SAMPLE_DRAWER_H_

#include <functional>
#include <string>
#include <vector>

#include "proto/coordinator.pb.h"
#include "worker/daemon/asked_work.h"
#include "worker/sample_text.h"

namespace dtrain::worker {

class SampleDrawer {
 public:
  // `setup`: the device, threads and tokenizer of every sample (its deadline is each ask's).
  SampleDrawer(std::vector<std::string> roots, SampleSetup setup, std::function<void()> answered);

  void Queue(const SampleAsk& ask) { work_.Queue(ask); }
  std::vector<SampleDrawn> Answers() const { return work_.Answers(); }
  void Delivered(size_t n) { work_.Delivered(n); }
  void Stop() { work_.Stop(); }

  // One ask drawn here and now, on the calling thread (what the drawer's thread runs).
  static SampleDrawn Draw(const SampleAsk& ask, const std::vector<std::string>& roots,
                          SampleSetup setup);

 private:
  AskedWork<SampleAsk, SampleDrawn> work_;
};

}  // namespace dtrain::worker

#endif  // DTRAIN_WORKER_DAEMON_SAMPLE_DRAWER_H_
