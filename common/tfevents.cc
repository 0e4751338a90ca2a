#include "common/tfevents.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "proto/tensorboard.pb.h"

namespace dtrain {
namespace {

const std::array<uint32_t, 256>& Crc32cTable() {
  static const auto* table = [] {
    auto* t = new std::array<uint32_t, 256>;
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      (*t)[i] = c;
    }
    return t;
  }();
  return *table;
}

void AppendLittleEndian(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

std::string EventRecord(const tensorboard::Event& event) {
  return TfRecord(event.SerializeAsString());
}

}  // namespace

uint32_t Crc32c(absl::string_view data) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = Crc32cTable()[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t MaskedCrc32c(absl::string_view data) {
  const uint32_t c = Crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string TfRecord(absl::string_view data) {
  std::string length;
  AppendLittleEndian(data.size(), 8, &length);
  std::string record = length;
  AppendLittleEndian(MaskedCrc32c(length), 4, &record);
  record.append(data.data(), data.size());
  AppendLittleEndian(MaskedCrc32c(data), 4, &record);
  return record;
}

std::string TfEventsFileVersion(double wall_time_s) {
  tensorboard::Event event;
  event.set_wall_time(wall_time_s);
  event.set_file_version("brain.Event:2");
  return EventRecord(event);
}

std::string TfEventsScalars(int64_t step, double wall_time_s,
                            const std::vector<std::pair<std::string, double>>& scalars) {
  tensorboard::Event event;
  event.set_wall_time(wall_time_s);
  event.set_step(step);
  for (const auto& [tag, value] : scalars) {
    tensorboard::Summary::Value* v = event.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  return EventRecord(event);
}

std::vector<std::pair<std::string, double>> TrainingScalars(const StepMetrics& step) {
  std::vector<std::pair<std::string, double>> scalars = {{"loss", step.loss()},
                                                         {"lr", step.learning_rate()},
                                                         {"grad_norm", step.grad_norm()},
                                                         {"tokens_per_s", step.tokens_per_s()}};
  if (step.has_val_loss()) scalars.emplace_back("val_loss", step.val_loss());
  return scalars;
}

std::string TfEventsFileOf(const std::vector<StepMetrics>& steps) {
  std::string file =
      TfEventsFileVersion(steps.empty() ? 0.0 : steps.front().time_unix_ms() / 1000.0);
  for (const StepMetrics& s : steps) {
    file += TfEventsScalars(s.step(), s.time_unix_ms() / 1000.0, TrainingScalars(s));
  }
  return file;
}

std::string TfEventsFileName(int64_t unix_seconds, const std::string& host) {
  return absl::StrCat("events.out.tfevents.", unix_seconds, ".", host);
}

absl::StatusOr<TfEventsWriter> TfEventsWriter::Create(const std::string& dir) {
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const absl::Time now = absl::Now();
  const std::string path = dir + "/" + TfEventsFileName(absl::ToUnixSeconds(now), host);
  std::FILE* file = std::fopen(path.c_str(), "ab");
  if (file == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("create the event file ", path));
  }
  TfEventsWriter writer(file, path);
  RETURN_IF_ERROR(
      writer.Write(TfEventsFileVersion(absl::ToDoubleSeconds(now - absl::UnixEpoch()))));
  return writer;
}

TfEventsWriter::TfEventsWriter(TfEventsWriter&& other) noexcept
    : file_(other.file_), path_(std::move(other.path_)) {
  other.file_ = nullptr;
}

TfEventsWriter& TfEventsWriter::operator=(TfEventsWriter&& other) noexcept {
  if (this != &other) {
    if (file_ != nullptr) std::fclose(file_);
    file_ = other.file_;
    path_ = std::move(other.path_);
    other.file_ = nullptr;
  }
  return *this;
}

TfEventsWriter::~TfEventsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status TfEventsWriter::Append(const StepMetrics& step) {
  return Write(TfEventsScalars(step.step(), step.time_unix_ms() / 1000.0, TrainingScalars(step)));
}

absl::Status TfEventsWriter::Write(const std::string& record) {
  if (file_ == nullptr) return absl::FailedPreconditionError("the event file is closed");
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("write the event file ", path_));
  }
  return absl::OkStatus();
}

}  // namespace dtrain
