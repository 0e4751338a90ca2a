// dtrain-worker: no test-only fault can be injected (test_only_faults.h).
#include "worker/daemon/test_only_faults.h"

namespace dtrain::worker {

absl::Status ApplyTestOnlyFaultFlags(WorkerOptions&) { return absl::OkStatus(); }

}  // namespace dtrain::worker
