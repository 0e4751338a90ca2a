// Which of a job's recorded steps a curve needs: a job of a month holds millions of steps, and a
// chart a few hundred pixels wide draws at most two a pixel (client/console_assets/curve.js), so
// the console asks the coordinator for a thinned selection (GetJobSteps) instead of streaming
// every step of the history to the browser.
//
// The rule, curve.js's decimate for two values at once: the step range is cut into buckets of
// equal width; each bucket keeps the steps of its lowest and its highest loss and tokens/s (a NaN
// only when its bucket has nothing else), so the envelope and a one-step spike of either curve
// stay; the first and the last step and every evaluated step (val_loss) are always kept.
#ifndef DTRAIN_COORDINATOR_STEP_THINNING_H_
#define DTRAIN_COORDINATOR_STEP_THINNING_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/job_store.h"
#include "proto/coordinator.pb.h"

namespace dtrain::coordinator {

// Takes steps in increasing order from `first` to `last` (inclusive) into `buckets` buckets.
class StepThinner {
 public:
  StepThinner(int64_t first, int64_t last, int buckets);

  void Add(const StepMetrics& m);
  // The kept steps, increasing. Call once, after the last Add.
  std::vector<StepMetrics> Take();

 private:
  // One bucket's candidates: its extremes, and the steps kept whatever their values.
  struct Bucket {
    std::optional<StepMetrics> low_loss, high_loss, low_tps, high_tps;
    std::vector<StepMetrics> always;  // the first step, evaluated steps
  };
  void Flush();

  const int64_t first_;
  const double width_;  // steps per bucket
  int64_t index_ = -1;  // the current bucket's
  Bucket bucket_;
  std::vector<StepMetrics> kept_;
  std::optional<StepMetrics> newest_;
};

// GetJobSteps: the job's steps in (after_step, until_step] as GetJobStepsRequest defines them,
// read from the store in batches (its lock is not held across the whole range). NOT_FOUND for an
// unknown job; INVALID_ARGUMENT for a max_steps outside 0..kMaxThinnedSteps or a negative range.
absl::StatusOr<GetJobStepsResponse> ReadJobSteps(JobStore& store,
                                                 const GetJobStepsRequest& request);

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_STEP_THINNING_H_
