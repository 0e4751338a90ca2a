#include "plan/job_sample.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace dtrain::plan {

absl::Status CheckSampleParameters(const SampleParameters& p) {
  if (p.prompt().size() > kMaxSamplePromptBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the prompt is longer than ", kMaxSamplePromptBytes, " bytes"));
  }
  if (p.tokens() < 1 || p.tokens() > kMaxSampleTokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokens=", p.tokens(), ": a whole number from 1 to ", kMaxSampleTokens, " is wanted"));
  }
  if (p.top_k() < 0 || p.top_k() > kMaxSampleTopK) {
    return absl::InvalidArgumentError(absl::StrCat(
        "top_k=", p.top_k(), ": a whole number from 0 to ", kMaxSampleTopK, " is wanted"));
  }
  if (!std::isfinite(p.temperature()) || p.temperature() < 0 ||
      p.temperature() > kMaxSampleTemperature) {
    return absl::InvalidArgumentError(absl::StrCat("temperature=", p.temperature(),
                                                   ": a number from 0 (greedy) to ",
                                                   kMaxSampleTemperature, " is wanted"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SampleSource> SampleSourceOf(const Job& job) {
  if (job.checkpoint().last_sealed_step() > 0 && !job.checkpoint().dir().empty()) {
    return SampleSource{job.checkpoint().dir(), 0,
                        absl::StrCat("checkpoint ", job.checkpoint().dir(), " (step ",
                                     job.checkpoint().last_sealed_step(), ")")};
  }
  if (!job.output().empty()) {
    return SampleSource{job.output(), job.spec().model().n_head(),
                        absl::StrCat("final weights ", job.output())};
  }
  return absl::FailedPreconditionError(
      absl::StrCat(job.id(), " has no sealed checkpoint and no final weights yet to sample from"));
}

std::string SamplerOf(const Job& job,
                      const google::protobuf::RepeatedPtrField<WorkerInfo>& workers) {
  const std::string rank0 =
      job.placement().ranks_size() > 0 ? job.placement().ranks(0).worker_id() : "";
  std::string host = job.checkpoint().host();
  for (const WorkerInfo& w : workers) {
    if (host.empty() && w.worker_id() == rank0) host = w.host_label();
  }
  if (host.empty()) return "";
  // Lower is better: idle before busy, then rank 0's worker, then the id.
  std::string best;
  int best_rank = 4;
  for (const WorkerInfo& w : workers) {
    if (w.host_label() != host || w.state() == LOST || w.state() == WORKER_STATE_UNSPECIFIED) {
      continue;
    }
    const int rank = (w.state() == BUSY ? 2 : 0) + (w.worker_id() == rank0 ? 0 : 1);
    if (rank < best_rank || (rank == best_rank && w.worker_id() < best)) {
      best = w.worker_id();
      best_rank = rank;
    }
  }
  return best;
}

}  // namespace dtrain::plan
