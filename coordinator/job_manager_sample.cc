// JobManager::SampleJob: text from a job's model, drawn by a live worker of the host that holds
// it, asked in that worker's next heartbeat (proto/coordinator.proto SampleJob).
#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "coordinator/job_manager.h"
#include "plan/job_sample.h"

namespace dtrain::coordinator {
namespace {

// The most a worker is given to draw one sample.
constexpr absl::Duration kMaxSampleTime = absl::Minutes(10);

absl::Status StatusOfDrawn(const SampleDrawn& drawn) {
  if (drawn.error_code() == 0) return absl::OkStatus();
  const auto code = static_cast<absl::StatusCode>(drawn.error_code());
  return absl::Status(code == absl::StatusCode::kOk ? absl::StatusCode::kInternal : code,
                      drawn.error());
}

}  // namespace

void JobManager::SampleJob(const SampleJobRequest& request, absl::Time deadline,
                           std::function<void(absl::StatusOr<SampleJobResponse>)> answer) {
  // Every end is counted (dtrain_coordinator_samples_total), whichever path it takes.
  auto done = [metrics = options_.metrics,
               answer = std::move(answer)](absl::StatusOr<SampleJobResponse> result) {
    if (metrics != nullptr) metrics->SampleEnded(result.status());
    answer(std::move(result));
  };
  if (request.job_id().empty()) return done(absl::InvalidArgumentError("job_id is empty"));
  if (absl::Status bounds = plan::CheckSampleParameters(request.parameters()); !bounds.ok()) {
    return done(bounds);
  }
  absl::StatusOr<Job> job = GetJob(request.job_id());
  if (!job.ok()) return done(job.status());
  absl::StatusOr<plan::SampleSource> source = plan::SampleSourceOf(*job);
  if (!source.ok()) return done(source.status());

  const std::string worker = plan::SamplerOf(*job, ListWorkers().workers());
  if (worker.empty()) {
    const std::string& host = job->checkpoint().host();
    return done(absl::FailedPreconditionError(absl::StrCat(
        "no live worker can read ", source->what, " of ", job->id(),
        host.empty() ? " (its host is not known)" : absl::StrCat(": none is registered on ", host),
        "; start one there, or sample the files where they are: dtrain sample PATH")));
  }

  // The worker answers in a heartbeat after it gave up at the latest: its deadline leaves one
  // interval and a margin before the caller's.
  const absl::Time now = absl::Now();
  const absl::Time until = std::min(deadline - absl::Milliseconds(200), now + kMaxSampleTime);
  const absl::Time worker_until =
      std::max(until - registry_.pace().interval - absl::Milliseconds(500), now);
  SampleAsk ask;
  ask.set_job_id(job->id());
  ask.set_path(source->path);
  ask.set_n_head(source->n_head);
  *ask.mutable_parameters() = request.parameters();
  ask.set_deadline_unix_ms(absl::ToUnixMillis(worker_until));
  SampleJobResponse response;
  response.set_source(source->what);
  response.set_worker_id(worker);
  // `done` is moved into the ask's callback only once the ask is taken.
  auto shared_done =
      std::make_shared<std::function<void(absl::StatusOr<SampleJobResponse>)>>(std::move(done));
  absl::Status asked = samples_.Ask(
      worker, std::move(ask), until,
      [response = std::move(response), shared_done](absl::StatusOr<SampleDrawn> drawn) mutable {
        if (!drawn.ok()) return (*shared_done)(drawn.status());
        if (absl::Status s = StatusOfDrawn(*drawn); !s.ok()) return (*shared_done)(s);
        *response.mutable_prompt_tokens() = drawn->prompt_tokens();
        *response.mutable_tokens() = drawn->tokens();
        response.set_text(drawn->text());
        (*shared_done)(std::move(response));
      });
  if (!asked.ok()) (*shared_done)(asked);
}

}  // namespace dtrain::coordinator
