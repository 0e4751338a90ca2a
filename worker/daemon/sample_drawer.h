// SampleDrawer: the samples the coordinator asks this worker to draw from a job's model
// (HeartbeatResponse.samples: `dtrain sample JOB`, the console), one at a time on a thread of
// their own (started at the first), on the CPU, so that neither a heartbeat nor a training step
// waits for one; a training job on this worker shares its cores meanwhile.
//
// A sample is drawn only from a path inside the worker's allowed roots (common/path_policy.h
// CheckPathResolved, symlinks resolved), as any path of a job; otherwise its answer says why
// (PERMISSION_DENIED) and nothing is read. Each ask is drawn once (asked again while queued,
// drawing or undelivered, it is not drawn twice), gives up at its deadline, and its answer
// (SampleDrawn) waits in Answers() until a heartbeat carrying it gets through (Delivered).
// `answered` is called (no lock held) when an answer is ready, so the worker heartbeats then
// rather than at its next interval.
//
//   SampleDrawer drawer(roots, {.device = "cpu", .threads = 2}, [this] { HeartbeatSoon(); });
//   drawer.Queue(ask);                                  // from a heartbeat's answer
//   for (const SampleDrawn& d : drawer.Answers()) ...   // into the next heartbeat
//   drawer.Delivered(n);                                // once it got through
#ifndef DTRAIN_WORKER_DAEMON_SAMPLE_DRAWER_H_
#define DTRAIN_WORKER_DAEMON_SAMPLE_DRAWER_H_

#include <deque>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/coordinator.pb.h"
#include "worker/sample_text.h"

namespace dtrain::worker {

class SampleDrawer {
 public:
  // `setup`: the device, threads and tokenizer of every sample (its deadline is each ask's).
  SampleDrawer(std::vector<std::string> roots, SampleSetup setup, std::function<void()> answered);
  ~SampleDrawer();  // Stop(), then joins the thread

  void Queue(const SampleAsk& ask);
  // The answers not yet delivered, oldest first.
  std::vector<SampleDrawn> Answers() const;
  // The first `n` of Answers() got through.
  void Delivered(size_t n);
  // Drops the asks not started; the one being drawn gives up at its next token (CANCELLED).
  void Stop();

  // One ask drawn here and now, on the calling thread (what the drawer's thread runs).
  static SampleDrawn Draw(const SampleAsk& ask, const std::vector<std::string>& roots,
                          SampleSetup setup);

 private:
  void Loop();

  const std::vector<std::string> roots_;
  const SampleSetup setup_;
  const std::function<void()> answered_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<SampleAsk> queued_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> open_ ABSL_GUARDED_BY(mu_);  // ask ids queued, drawing or undelivered
  std::vector<SampleDrawn> answers_ ABSL_GUARDED_BY(mu_);
  std::thread thread_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dtrain::worker

#endif  // DTRAIN_WORKER_DAEMON_SAMPLE_DRAWER_H_
