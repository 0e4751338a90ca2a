// Gathering for `dtrain diagnose JOB`: asks every rank of a job's current run for its flight
// recorder at once (PeerService.Diagnose on the rank's peer service, with the run's job id and
// peer secret, over the cluster's mutual TLS) with one short deadline, then hands what came back
// to the analysis (diagnosis.h). Nothing blocks: the calls are gRPC callbacks, and `done` runs
// on the thread of the last one to end, at most `deadline` after the start.
//
//   RETURN_IF_ERROR(StartDiagnosis(job, manager->ListWorkers().workers(), options,
//                                  [reactor, response](JobDiagnosis d) { ... }));
#ifndef DTRAIN_COORDINATOR_DIAGNOSE_JOB_H_
#define DTRAIN_COORDINATOR_DIAGNOSE_JOB_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/tls.h"
#include "coordinator/policy/diagnosis.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"

namespace dtrain::coordinator {

struct GatherOptions {
  // How long each rank has to answer; one that does not is a finding.
  absl::Duration deadline = absl::Seconds(2);
  // The coordinator's credentials towards workers' peer services (they require a certificate of
  // the cluster CA and present the worker name, common/tls.h).
  TlsFiles tls = TlsFiles::Insecure();
  DiagnosisOptions analysis;
  // Clock probes per rank before its recorder is asked (`dtrain trace`): short Diagnose calls
  // (clock_only) one after the other. Every call, the recorder's too, gives an estimate of the
  // rank's clock offset; the one with the shortest round trip is kept (RankState.clock_*).
  int clock_probes = 0;
};

// FailedPrecondition when the job has no run to ask (not RUNNING, no placement, or a single
// rank, which serves no peer service); else starts the calls and returns OK, and `done` gets
// the analysed diagnosis once every rank answered or failed. `workers`: the registry's, for each
// rank's last heartbeat.
absl::Status StartDiagnosis(const Job& job,
                            const google::protobuf::RepeatedPtrField<WorkerInfo>& workers,
                            const GatherOptions& options, std::function<void(JobDiagnosis)> done);

// The gathering alone, for `dtrain trace` (trace_job.h): the same calls, and `done` gets every
// rank's identity, answer or error, clock offset and whole recorder, not analysed.
absl::Status StartGathering(const Job& job,
                            const google::protobuf::RepeatedPtrField<WorkerInfo>& workers,
                            const GatherOptions& options, std::function<void(JobDiagnosis)> done);

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_DIAGNOSE_JOB_H_
