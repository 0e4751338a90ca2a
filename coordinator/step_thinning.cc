#include "coordinator/step_thinning.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_limits.h"
#include "common/status_macros.h"

namespace dtrain::coordinator {
namespace {

// Replaces `*held` by `m` when `m`'s value is further out (lower when `low`); a NaN held value
// gives way to anything, and a NaN never displaces a number.
void Extreme(std::optional<StepMetrics>* held, const StepMetrics& m,
             double (StepMetrics::*value)() const, bool low) {
  if (!held->has_value()) {
    *held = m;
    return;
  }
  const double v = (m.*value)(), h = (**held.*value)();
  if (std::isnan(v)) return;
  if (std::isnan(h) || (low ? v < h : v > h)) *held = m;
}

// Steps read from the store per call: its lock is taken once per batch.
constexpr int kReadBatch = 8192;

}  // namespace

StepThinner::StepThinner(int64_t first, int64_t last, int buckets)
    : first_(first),
      width_(static_cast<double>(std::max<int64_t>(last - first + 1, 1)) / std::max(buckets, 1)) {}

void StepThinner::Add(const StepMetrics& m) {
  const int64_t index = static_cast<int64_t>(std::floor((m.step() - first_) / width_));
  if (index != index_) {
    Flush();
    index_ = index;
  }
  if (!newest_.has_value() || m.has_val_loss()) bucket_.always.push_back(m);
  Extreme(&bucket_.low_loss, m, &StepMetrics::loss, /*low=*/true);
  Extreme(&bucket_.high_loss, m, &StepMetrics::loss, /*low=*/false);
  Extreme(&bucket_.low_tps, m, &StepMetrics::tokens_per_s, /*low=*/true);
  Extreme(&bucket_.high_tps, m, &StepMetrics::tokens_per_s, /*low=*/false);
  newest_ = m;
}

void StepThinner::Flush() {
  std::vector<StepMetrics> rows = std::move(bucket_.always);
  for (std::optional<StepMetrics>* e :
       {&bucket_.low_loss, &bucket_.high_loss, &bucket_.low_tps, &bucket_.high_tps}) {
    if (e->has_value()) rows.push_back(**e);
  }
  bucket_ = Bucket();
  std::sort(rows.begin(), rows.end(),
            [](const StepMetrics& a, const StepMetrics& b) { return a.step() < b.step(); });
  for (StepMetrics& m : rows) {
    if (kept_.empty() || kept_.back().step() != m.step()) kept_.push_back(std::move(m));
  }
}

std::vector<StepMetrics> StepThinner::Take() {
  Flush();
  if (newest_.has_value() && (kept_.empty() || kept_.back().step() != newest_->step())) {
    kept_.push_back(*newest_);
  }
  return std::move(kept_);
}

absl::StatusOr<GetJobStepsResponse> ReadJobSteps(JobStore& store,
                                                 const GetJobStepsRequest& request) {
  if (request.max_steps() < 0 || request.max_steps() > kMaxThinnedSteps) {
    return absl::InvalidArgumentError(absl::StrCat("max_steps ", request.max_steps(),
                                                   " is outside 0 (", kDefaultThinnedSteps, ") to ",
                                                   kMaxThinnedSteps));
  }
  if (request.after_step() < 0 || request.until_step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("steps after ", request.after_step(), " until ",
                                                   request.until_step(),
                                                   ": a step is not negative"));
  }
  RETURN_IF_ERROR(store.GetJob(request.job_id(), /*with_history=*/false).status());
  const int max_steps = request.max_steps() == 0 ? kDefaultThinnedSteps : request.max_steps();
  const int64_t until =
      request.until_step() == 0 ? std::numeric_limits<int64_t>::max() : request.until_step();
  ASSIGN_OR_RETURN(MetricsExtent extent,
                   store.MetricsExtentOf(request.job_id(), request.after_step(), until));
  GetJobStepsResponse response;
  response.set_recorded(extent.count);
  if (extent.count == 0) return response;
  // Four extremes a bucket: about max_steps in all, with the evaluated steps besides.
  const bool thin = extent.count > max_steps;
  StepThinner thinner(extent.first, extent.last, std::max(max_steps / 4, 1));
  int64_t after = request.after_step();
  while (after < extent.last) {
    ASSIGN_OR_RETURN(std::vector<StepMetrics> batch,
                     store.MetricsAfter(request.job_id(), after, kReadBatch));
    if (batch.empty()) break;
    after = batch.back().step();  // before the steps are moved out
    for (StepMetrics& m : batch) {
      if (m.step() > extent.last) break;
      if (thin) {
        thinner.Add(m);
      } else {
        *response.add_steps() = std::move(m);
      }
    }
  }
  if (thin) {
    for (StepMetrics& m : thinner.Take()) *response.add_steps() = std::move(m);
  }
  return response;
}

}  // namespace dtrain::coordinator
