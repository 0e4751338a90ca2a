// TensorBoard event files (events.out.tfevents.*) of a job's scalars, which TensorBoard reads.
//
// A file is a sequence of TFRecords, each
//   uint64 length | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
// (little-endian), where data is a serialized tensorboard.Event (proto/tensorboard.proto) and
// masked_crc32c(x) = ((c >> 15) | (c << 17)) + 0xa282ead8 with c the CRC-32C (Castagnoli) of x.
// The first record is an Event with file_version "brain.Event:2"; then one Event per step whose
// Summary holds one simple_value per scalar.
//
//   std::string file = TfEventsFileVersion(absl::Now());
//   file += TfEventsScalars(step, wall_time_s, {{"loss", 2.31}, {"lr", 6e-4}});
//
// The tags of a training step are those of TrainingScalars: loss, lr, grad_norm, tokens_per_s,
// and val_loss on the steps with an evaluation.
#ifndef DTRAIN_COMMON_TFEVENTS_H_
#define DTRAIN_COMMON_TFEVENTS_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/job.pb.h"

namespace dtrain {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `data`; 0xE3069283 for "123456789".
uint32_t Crc32c(absl::string_view data);
uint32_t MaskedCrc32c(absl::string_view data);

// One TFRecord holding `data`.
std::string TfRecord(absl::string_view data);

// The first record of every event file, at `wall_time_s` (seconds since the Unix epoch).
std::string TfEventsFileVersion(double wall_time_s);

// One record: an Event at `step` and `wall_time_s` whose Summary has (tag, value) in order.
std::string TfEventsScalars(int64_t step, double wall_time_s,
                            const std::vector<std::pair<std::string, double>>& scalars);

// The scalars of one training step, tag and value: loss, lr, grad_norm, tokens_per_s, and
// val_loss when the step has one (StepMetrics.val_loss).
std::vector<std::pair<std::string, double>> TrainingScalars(const StepMetrics& step);

// A whole event file of `steps` (wall time: each step's time_unix_ms).
std::string TfEventsFileOf(const std::vector<StepMetrics>& steps);

// "events.out.tfevents.<unix seconds>.<host>", TensorBoard's name for a new file.
std::string TfEventsFileName(int64_t unix_seconds, const std::string& host);

// Appends records to an event file in a directory, each flushed as written, so a reader sees
// whole steps while the job trains. Move-only; closes on destruction.
class TfEventsWriter {
 public:
  // Creates DIR/events.out.tfevents.<now>.<host> and writes the file-version record.
  static absl::StatusOr<TfEventsWriter> Create(const std::string& dir);
  TfEventsWriter(TfEventsWriter&& other) noexcept;
  TfEventsWriter& operator=(TfEventsWriter&& other) noexcept;
  ~TfEventsWriter();

  absl::Status Append(const StepMetrics& step);
  const std::string& path() const { return path_; }

 private:
  TfEventsWriter(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {}
  absl::Status Write(const std::string& record);
  std::FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace dtrain

#endif  // DTRAIN_COMMON_TFEVENTS_H_
