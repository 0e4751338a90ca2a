// Job specs: parsing the JSON a user submits, validating it and filling in the defaults.
//
// A spec is a dtrain.JobSpec (proto/job.proto) written in protobuf's JSON mapping, so its keys
// are the proto field names (lowerCamelCase spellings are accepted too, as protobuf does):
//
//   {"name": "tiny", "model": {"vocab_size": 256, "context": 64, "n_layer": 4, "n_head": 4,
//    "n_embd": 64}, "dataset": "/data/tiny.bin", "steps": 100, "batch_size": 8,
//    "parallel": {"dp": 2, "pp": 2, "tp": 1, "schedule": "1f1b"}}
//
// Errors name the field by its JSON path ("parallel.tp", "optimizer.beta2") and list every
// problem at once, so a user fixes a spec in one round trip.
#ifndef DTRAIN_COORDINATOR_JOB_SPEC_H_
#define DTRAIN_COORDINATOR_JOB_SPEC_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/job.pb.h"

namespace dtrain::coordinator {

// Parses a spec from JSON. InvalidArgument for malformed JSON (protobuf's message, with the
// position), for every unknown field (all of them, with their paths and a "did you mean" when a
// known field is close: `unknown field "parallel.tpp" (did you mean "tp"?)`), and for values of
// the wrong type. Does not validate or default; see ValidateAndDefault.
absl::StatusOr<JobSpec> ParseJobSpecJson(absl::string_view json);

// Checks `spec` and returns it with every default filled in, so workers never interpret zeros:
//   parallel.dp/pp/tp 0 -> 1, parallel.schedule "" -> "1f1b", parallel.virtual_stages 0 -> 1,
//   parallel.bucket_bytes 0 -> 25 MiB, micro_batch_size 0 -> batch_size / dp,
//   seq_len 0 -> model.context, device "" -> "auto", seed 0 -> 1337, and each unset optional
//   optimizer field -> worker/model/optimizer.h's default (max_lr 6e-4, min_lr_ratio 0.1,
//   weight_decay 0.1, beta1 0.9, beta2 0.95, eps 1e-8, grad_clip 1.0).
// One InvalidArgument listing every problem, each naming its JSON field, e.g.
//   "invalid job spec: steps=0 must be positive; parallel.tp=3 does not divide model.n_head=4"
// Checked: the model (model::Validate), the optimizer (model::Validate), steps, batch sizes
// against dp and micro_batch_size, seq_len <= context, tp | n_head, pp <= n_layer, the schedule
// (interleaved: virtual_stages >= 2, pp >= 2, pp * virtual_stages <= n_layer), dataset, device,
// checkpoint.interval_steps, checkpoint.dir (required on more than one worker) and the total
// worker count (at most kMaxWorkersPerJob).
absl::StatusOr<JobSpec> ValidateAndDefault(JobSpec spec);

// ParseJobSpecJson then ValidateAndDefault, with one error listing the unknown fields and every
// other problem of the spec together (only malformed JSON or a value of the wrong type stops the
// checks early). What SubmitJob and `dtrain plan` use.
absl::StatusOr<JobSpec> ParseAndValidateJobSpecJson(absl::string_view json);

// Workers a validated spec needs: dp * pp * tp.
int64_t WorkersNeeded(const JobSpec& spec);

// Upper bound on dp * pp * tp, so a typo cannot queue a job no cluster will ever run.
inline constexpr int64_t kMaxWorkersPerJob = 65536;

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_JOB_SPEC_H_
