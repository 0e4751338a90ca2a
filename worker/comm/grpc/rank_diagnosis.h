// A rank's flight recorder as the PeerService's Diagnose answers it (proto/peer.proto's
// RankDiagnosis): every record, oldest first, and the rank's clock now.
#ifndef DTRAIN_WORKER_COMM_GRPC_RANK_DIAGNOSIS_H_
#define DTRAIN_WORKER_COMM_GRPC_RANK_DIAGNOSIS_H_

#include "proto/peer.pb.h"
#include "worker/comm/flight_recorder.h"

namespace dtrain::comm {

RankDiagnosis RankDiagnosisOf(const FlightRecorder& recorder, int rank);
FlightEntry ToFlightEntry(const FlightRecord& record);

}  // namespace dtrain::comm

#endif  // DTRAIN_WORKER_COMM_GRPC_RANK_DIAGNOSIS_H_
