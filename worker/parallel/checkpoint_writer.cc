#include "worker/parallel/checkpoint_writer.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/files.h"
#include "common/job_paths.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "worker/model/checkpoint_dir.h"

namespace dtrain::parallel {
namespace {

// How often rank 0 looks for the other ranks' entries while it waits.
constexpr absl::Duration kPollInterval = absl::Milliseconds(2);

double SecondsSince(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

std::string ChecksumHex(uint64_t checksum) { return absl::StrFormat("%016x", checksum); }

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) return absl::InternalError(std::string(status.message()));
  return json;
}

absl::Status FromJson(const std::string& json, google::protobuf::Message* message) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;  // a newer writer's fields
  const auto status = google::protobuf::util::JsonStringToMessage(json, message, options);
  if (!status.ok()) return absl::DataLossError(std::string(status.message()));
  return absl::OkStatus();
}

}  // namespace

std::string RankEntriesFileName(int rank) {
  return absl::StrFormat("rank-%05d.entries.json", rank);
}

CheckpointWriter::CheckpointWriter(CheckpointWriterOptions options)
    : options_(std::move(options)) {}

CheckpointWriter::~CheckpointWriter() {
  Abandon(absl::ZeroDuration());
  Join();
}

void CheckpointWriter::Join() {
  if (thread_.joinable()) thread_.join();
}

void CheckpointWriter::Abandon(absl::Duration grace) {
  absl::MutexLock lock(&mu_);
  abandon_at_ = std::min(abandon_at_, absl::Now() + grace);
  changed_.SignalAll();
}

absl::Status CheckpointWriter::Submit(int64_t step, std::vector<PendingFile> files,
                                      double snapshot_seconds) {
  if (step <= last_step_) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint step ", step, " submitted after step ", last_step_, " (rank ",
                     options_.rank, "): steps are written in order"));
  }
  // At most one step in flight: the previous one must be done (and this wait is the caller's).
  const absl::Time start = absl::Now();
  Join();
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(failure_);
    done_ = false;
  }
  last_step_ = step;
  blocked_seconds_ = snapshot_seconds + SecondsSince(start);
  auto run = [this, step, files = std::move(files)]() mutable {
    absl::StatusOr<CheckpointWritten> written = Write(step, std::move(files));
    absl::MutexLock lock(&mu_);
    if (written.ok()) {
      finished_.push_back(*std::move(written));
    } else {
      failure_ = written.status();
    }
    done_ = true;
  };
  if (!options_.background) {
    run();
    absl::MutexLock lock(&mu_);
    return failure_;
  }
  thread_ = std::thread(std::move(run));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CheckpointWritten>> CheckpointWriter::TakeFinished() {
  bool done;
  {
    absl::MutexLock lock(&mu_);
    done = done_;
  }
  if (done) Join();  // the thread has finished: this does not wait
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(failure_);
  std::vector<CheckpointWritten> finished;
  finished.swap(finished_);
  return finished;
}

absl::StatusOr<std::vector<CheckpointWritten>> CheckpointWriter::Finish() {
  Join();
  return TakeFinished();
}

absl::StatusOr<CheckpointWritten> CheckpointWriter::Write(int64_t step,
                                                          std::vector<PendingFile> files) {
  const absl::Time start = absl::Now();
  const std::string where = absl::StrCat("checkpoint step ", step, ", rank ", options_.rank);
  absl::StatusOr<std::string> step_dir =
      model::PrepareStepDirectory(options_.dir, step, kManifestFileName);
  if (!step_dir.ok()) return Annotate(step_dir.status(), where);
  CheckpointRankEntries entries;
  entries.set_step(step);
  entries.set_rank(options_.rank);
  entries.set_run_token(options_.run_token);
  for (PendingFile& file : files) {
    // The checksum of the very bytes written: nobody reads the file back to compute it.
    ShardFileEntry& entry = *entries.add_files() = std::move(file.entry);
    entry.set_name(file.name);
    entry.set_bytes(static_cast<int64_t>(file.bytes.size()));
    entry.set_xxh3_64(ChecksumHex(ShardChecksum(file.bytes)));
    RETURN_IF_ERROR(
        Annotate(WriteFileAtomically(absl::StrCat(*step_dir, "/", file.name), file.bytes),
                 absl::StrCat(where, ", file ", file.name)));
    std::string().swap(file.bytes);  // the snapshot's memory goes back as soon as it is on disk
  }
  // Only now, with every file durable, may rank 0 count this rank's part of the step.
  ASSIGN_OR_RETURN(const std::string json, ToJson(entries));
  const std::string entries_name = RankEntriesFileName(options_.rank);
  RETURN_IF_ERROR(Annotate(WriteFileAtomically(absl::StrCat(*step_dir, "/", entries_name), json),
                           absl::StrCat(where, ", file ", entries_name)));
  CheckpointWritten written{step, *step_dir, /*sealed=*/false, 0, blocked_seconds_};
  if (options_.rank == 0) {
    ASSIGN_OR_RETURN(std::vector<ShardFileEntry> all, AwaitEntries(step, *step_dir));
    if (!options_.seal) {
      return absl::InternalError(absl::StrCat(where, ": rank 0's writer has no seal function"));
    }
    RETURN_IF_ERROR(Annotate(options_.seal(step, std::move(all)),
                             absl::StrCat(where, ": cannot seal ", *step_dir)));
    written.sealed = true;
  }
  written.seconds = SecondsSince(start);
  // In the foreground training waited for all of it.
  if (!options_.background) written.blocked_seconds += written.seconds;
  return written;
}

absl::StatusOr<std::vector<ShardFileEntry>> CheckpointWriter::AwaitEntries(
    int64_t step, const std::string& step_dir) {
  const int n = options_.world_size;
  std::vector<CheckpointRankEntries> found(n);
  std::vector<bool> have(n, false);
  int missing = n;
  const absl::Time deadline = absl::Now() + options_.seal_timeout;
  while (true) {
    for (int r = 0; r < n; ++r) {
      if (have[r]) continue;
      const std::string path = absl::StrCat(step_dir, "/", RankEntriesFileName(r));
      if (!Exists(path)) continue;
      // Each entries file is written atomically: one that is there is complete.
      absl::StatusOr<std::string> json = ReadFileToString(path);
      if (!json.ok()) return Annotate(json.status(), absl::StrCat("checkpoint step ", step));
      CheckpointRankEntries entries;
      RETURN_IF_ERROR(
          Annotate(FromJson(*json, &entries), absl::StrCat("checkpoint step ", step, ": ", path)));
      // An earlier run's leftover, which this run's rank r has not replaced yet.
      if (entries.run_token() != options_.run_token || entries.step() != step) continue;
      if (entries.rank() != r) {
        return absl::DataLossError(absl::StrCat("checkpoint step ", step, ": ", path,
                                                " holds the entries of rank ", entries.rank()));
      }
      found[r] = std::move(entries);
      have[r] = true;
      --missing;
    }
    if (missing == 0) break;
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    if (now >= std::min(deadline, abandon_at_)) {
      std::vector<int> late;
      for (int r = 0; r < n; ++r) {
        if (!have[r]) late.push_back(r);
      }
      const std::string what = absl::StrCat(
          "checkpoint step ", step, ": rank 0 cannot seal ", step_dir, ": no entries from rank",
          late.size() > 1 ? "s " : " ", absl::StrJoin(late, ", "));
      if (now >= abandon_at_) {
        return absl::AbortedError(absl::StrCat(what,
                                               " before the run ended; `latest` still "
                                               "names the previous sealed step"));
      }
      return absl::DeadlineExceededError(absl::StrCat(
          what, " within ", absl::FormatDuration(options_.seal_timeout),
          " (their files are not all durable); `latest` still names the previous sealed step"));
    }
    changed_.WaitWithTimeout(&mu_, std::min(kPollInterval, std::min(deadline, abandon_at_) - now));
  }
  std::vector<ShardFileEntry> all;
  for (CheckpointRankEntries& entries : found) {
    for (ShardFileEntry& entry : *entries.mutable_files()) all.push_back(std::move(entry));
  }
  return all;
}

absl::Status VerifySealedStep(const std::string& step_dir) {
  const std::string manifest_path = absl::StrCat(step_dir, "/", kManifestFileName);
  // One worker's steps of earlier versions have no checksums to verify; their loader reads
  // them whole.
  if (!Exists(manifest_path) && Exists(absl::StrCat(step_dir, "/", model::kOptimizerFileName))) {
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> json = ReadFileToString(manifest_path);
  if (!json.ok()) {
    return absl::DataLossError(
        absl::StrCat(kManifestFileName, " is unreadable: ", json.status().message()));
  }
  CheckpointManifest manifest;
  if (absl::Status s = FromJson(*json, &manifest); !s.ok()) {
    return absl::DataLossError(absl::StrCat(kManifestFileName, " does not parse: ", s.message()));
  }
  const bool xxh3 = manifest.checksum() == ChecksumName(ChecksumKind::kXxh3_64);
  if (!xxh3 && manifest.checksum() != ChecksumName(ChecksumKind::kFnv1a64)) {
    return absl::DataLossError(
        absl::StrCat(kManifestFileName, ": unknown checksum \"", manifest.checksum(), "\""));
  }
  for (const ShardFileEntry& entry : manifest.files()) {
    absl::StatusOr<std::string> bytes = ReadFileToString(absl::StrCat(step_dir, "/", entry.name()));
    if (!bytes.ok()) {
      return absl::DataLossError(absl::StrCat(
          entry.name(), absl::IsNotFound(bytes.status()) ? ": missing" : ": unreadable"));
    }
    if (static_cast<int64_t>(bytes->size()) != entry.bytes()) {
      return absl::DataLossError(absl::StrCat(entry.name(), ": ", bytes->size(),
                                              " bytes, the manifest says ", entry.bytes()));
    }
    const uint64_t checksum =
        ShardChecksum(*bytes, xxh3 ? ChecksumKind::kXxh3_64 : ChecksumKind::kFnv1a64);
    if (ChecksumHex(checksum) != (xxh3 ? entry.xxh3_64() : entry.fnv1a64())) {
      return absl::DataLossError(absl::StrCat(entry.name(), ": checksum differs"));
    }
  }
  return absl::OkStatus();
}

absl::Status SetAsideDamagedSteps(const std::string& dir, const std::vector<std::string>& damaged) {
  const std::string job_dir = AbsolutePath(dir);
  for (const std::string& step_dir : damaged) {
    const size_t slash = step_dir.rfind('/');
    if (slash == std::string::npos || step_dir.substr(0, slash) != job_dir) continue;
    const std::string aside = absl::StrCat(job_dir, "/damaged-", step_dir.substr(slash + 1));
    std::string target = aside;
    for (int n = 2; Exists(target); ++n) target = absl::StrCat(aside, "-", n);
    if (rename(step_dir.c_str(), target.c_str()) != 0) {
      return absl::ErrnoToStatus(
          errno, absl::StrCat("cannot set the damaged step ", step_dir, " aside as ", target));
    }
  }
  return absl::OkStatus();
}

}  // namespace dtrain::parallel
