// Test only: fills a coordinator database through JobStore as a coordinator that accepted big
// specs would have, faster than submitting them: one job named --first_name, then --jobs jobs
// named --name whose specs carry --spec_bytes of dataset path each. Ended (SUCCEEDED), so a
// coordinator started on the file schedules nothing.
//
//   fill_store_for_testing --db=/tmp/c.db --jobs=1000 --spec_bytes=1048576 --name=hay
//       --first_name=needle
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "coordinator/job_store.h"

ABSL_FLAG(std::string, db, "", "the coordinator database to fill (created when absent)");
ABSL_FLAG(int, jobs, 1000, "how many jobs named --name");
ABSL_FLAG(int, spec_bytes, 1 << 20, "bytes of each one's spec (its dataset path)");
ABSL_FLAG(std::string, name, "hay", "their spec.name");
ABSL_FLAG(std::string, first_name, "", "when set, a first job with this name, before them");

namespace dtrain::coordinator {
namespace {

absl::Status Add(JobStore& store, const std::string& name, int spec_bytes) {
  JobSpec spec;
  spec.set_name(name);
  spec.set_steps(10);
  spec.set_dataset(std::string(spec_bytes, 'd'));
  absl::StatusOr<Job> job = store.CreateJob(spec, "queued", 1);
  if (!job.ok()) return job.status();
  // The lifecycle's own path to an end (coordinator/job_transitions.h).
  for (JobState state : {PLACING, RUNNING}) {
    if (absl::Status s = store.UpdateState(job->id(), state, "filled for a test", 2); !s.ok()) {
      return s;
    }
  }
  return store.UpdateState(job->id(), SUCCEEDED, "filled for a test", 2);
}

int Main() {
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(absl::GetFlag(FLAGS_db));
  absl::Status status = store.status();
  if (status.ok() && !absl::GetFlag(FLAGS_first_name).empty()) {
    status = Add(**store, absl::GetFlag(FLAGS_first_name), 64);
  }
  for (int i = 0; status.ok() && i < absl::GetFlag(FLAGS_jobs); ++i) {
    status = Add(**store, absl::GetFlag(FLAGS_name), absl::GetFlag(FLAGS_spec_bytes));
  }
  if (!status.ok()) {
    std::fprintf(stderr, "fill_store_for_testing: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace dtrain::coordinator

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return dtrain::coordinator::Main();
}
