#include "worker/parallel/checkpoint_writer.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include <algorithm>
#include <random>
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

// How often rank 0 looks for the other ranks' entries (and asks options.peers_failed) while it
// waits: 2 ms after each entries file found (the others are usually moments behind), doubling up
// to 50 ms while none comes. The other ranks' files (on another host, over a shared file
// system) and their failures have no event to wait on here; a stop (Abandon) wakes it at once.
// 50 ms is what a dead peer adds at most to a wait that ends at its failure.
constexpr absl::Duration kFirstPoll = absl::Milliseconds(2);
constexpr absl::Duration kLongestPoll = absl::Milliseconds(50);
// Rank 0 of a stopped run: how long it still waits for the other ranks' entries of the step in
// flight (a recovery's stop phase waits for it).
constexpr absl::Duration kStoppedSealGrace = absl::Seconds(1);

double SecondsSince(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

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

uint64_t NewRunTokenBits() {
  std::random_device random;
  return ((uint64_t{random()} << 32) | random()) & ((uint64_t{1} << 48) - 1);
}

std::string RunTokenText(uint64_t bits) {
  return absl::StrFormat("%012x", bits & ((uint64_t{1} << 48) - 1));
}

absl::Status CheckpointWriter::StillClaimed(absl::string_view where) const {
  if (!options_.run_attempt.has_value()) return absl::OkStatus();
  return Annotate(model::CheckRunClaim(*dir_, {*options_.run_attempt, options_.run_token}), where);
}

CheckpointWriter::CheckpointWriter(CheckpointWriterOptions options)
    : options_(std::move(options)), dir_(model::HeldDirectory::Create(options_.dir)) {}

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
                                      double snapshot_seconds, bool keep) {
  const bool rewrite = step == last_step_ && rewrite_last_;
  rewrite_last_ = false;
  if (step <= last_step_ && !rewrite) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint step ", step, " submitted after step ", last_step_, " (rank ",
                     options_.rank, "): steps are written in order"));
  }
  // At most one step in flight: the previous one must be done (and this wait is the caller's).
  const absl::Time start = absl::Now();
  Join();
  if (!dir_.ok()) {
    return Annotate(dir_.status(), absl::StrCat("checkpoint directory of rank ", options_.rank));
  }
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(failure_);
    done_ = false;
  }
  last_step_ = step;
  if (keep) keep_step_ = step;
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
  // A run replaced while it was frozen writes nothing into its successor's directory.
  RETURN_IF_ERROR(StillClaimed(where));
  auto skipped = [&](const std::string& reason) -> absl::StatusOr<CheckpointWritten> {
    CheckpointWritten w{step, dir_->PathOf(StepDirName(step)), false, 0, blocked_seconds_};
    w.skipped = true;
    w.skip_reason = reason;
    // No partial step is left behind (with several ranks: only rank 0, once every rank has
    // published, so that nobody writes into it afterwards).
    if (options_.world_size == 1 || options_.rank == 0) {
      RETURN_IF_ERROR(StillClaimed(where));
      RETURN_IF_ERROR(Annotate(dir_->Remove(StepDirName(step)), where));
    }
    return w;
  };
  // Why this rank cannot hold the step ("": it can): too little free space before writing, or
  // ENOSPC while writing.
  std::string skip;
  int64_t need = 64 << 10;  // the entries file, the manifest and directory blocks
  for (const PendingFile& file : files) need += static_cast<int64_t>(file.bytes.size());
  struct statvfs fs;
  if (fstatvfs(dir_->fd(), &fs) == 0) {
    const int64_t free_bytes = static_cast<int64_t>(fs.f_bavail) * fs.f_frsize;
    if (free_bytes < need) {
      skip = absl::StrCat(dir_->path(), " has ", free_bytes, " bytes free, the step needs ", need);
    }
  }
  absl::StatusOr<model::HeldDirectory> step_dir =
      model::PrepareStepDirectory(*dir_, step, kManifestFileName);
  if (!step_dir.ok()) return Annotate(step_dir.status(), where);
  CheckpointRankEntries entries;
  entries.set_step(step);
  entries.set_rank(options_.rank);
  entries.set_run_token(options_.run_token);
  for (PendingFile& file : files) {
    if (!skip.empty()) break;
    // The checksum of the very bytes written: nobody reads the file back to compute it.
    ShardFileEntry& entry = *entries.add_files() = std::move(file.entry);
    entry.set_name(file.name);
    entry.set_bytes(static_cast<int64_t>(file.bytes.size()));
    entry.set_xxh3_64(ChecksumHex(ShardChecksum(file.bytes)));
    const absl::Status wrote = step_dir->WriteFileAtomically(file.name, file.bytes);
    if (absl::IsResourceExhausted(wrote)) {
      skip = absl::StrCat("the disk filled while writing ", file.name, " (", wrote.message(), ")");
      break;
    }
    RETURN_IF_ERROR(Annotate(wrote, absl::StrCat(where, ", file ", file.name)));
    std::string().swap(file.bytes);  // the snapshot's memory goes back as soon as it is on disk
  }
  // Only now, with every file durable, may rank 0 count this rank's part of the step.
  const std::string entries_name = RankEntriesFileName(options_.rank);
  if (skip.empty()) {
    ASSIGN_OR_RETURN(const std::string json, ToJson(entries));
    const absl::Status published = step_dir->WriteFileAtomically(entries_name, json);
    if (absl::IsResourceExhausted(published)) {
      skip = absl::StrCat("the disk filled while writing ", entries_name, " (", published.message(),
                          ")");
    } else {
      RETURN_IF_ERROR(Annotate(published, absl::StrCat(where, ", file ", entries_name)));
    }
  }
  if (!skip.empty()) {
    if (options_.world_size == 1) return skipped(skip);
    // Several ranks: this rank's entries say that it skips instead of listing files, so that
    // rank 0 skips the step for every rank. A few hundred bytes: when even they do not fit,
    // the step fails as any other write error.
    CheckpointRankEntries skips;
    skips.set_step(step);
    skips.set_rank(options_.rank);
    skips.set_run_token(options_.run_token);
    skips.set_skipped(skip);
    ASSIGN_OR_RETURN(const std::string json, ToJson(skips));
    RETURN_IF_ERROR(Annotate(step_dir->WriteFileAtomically(entries_name, json),
                             absl::StrCat(where, ": cannot say that it skips the step (", skip,
                                          "), file ", entries_name)));
  }
  CheckpointWritten written{step, step_dir->path(), /*sealed=*/false, 0, blocked_seconds_};
  if (options_.rank == 0) {
    ASSIGN_OR_RETURN(RankEntries all, AwaitEntries(step, *step_dir));
    // Every rank has published: the step is sealed for all of them, or skipped for all.
    // Every skipping rank's reason, rank 0's own among them (it published its skip too).
    if (!all.skipped.empty()) return skipped(all.skipped);
    if (!skip.empty()) return skipped(absl::StrCat("rank 0: ", skip));  // (not reached)
    if (!options_.seal) {
      return absl::InternalError(absl::StrCat(where, ": rank 0's writer has no seal function"));
    }
    if (options_.test_only_before_seal) options_.test_only_before_seal(step);
    RETURN_IF_ERROR(StillClaimed(absl::StrCat(where, ": not sealed")));
    RETURN_IF_ERROR(Annotate(options_.seal(*dir_, step, std::move(all.files)),
                             absl::StrCat(where, ": cannot seal ", step_dir->path())));
    written.sealed = true;
    if (options_.keep_last > 0) {
      RETURN_IF_ERROR(Annotate(
          model::PruneSealedSteps(*dir_, options_.keep_last, options_.keep_every, keep_step_)
              .status(),
          absl::StrCat(where, ": retention")));
    }
  } else if (!skip.empty()) {
    return skipped(skip);
  }
  written.seconds = SecondsSince(start);
  // In the foreground training waited for all of it.
  if (!options_.background) written.blocked_seconds += written.seconds;
  return written;
}

absl::StatusOr<CheckpointWriter::RankEntries> CheckpointWriter::AwaitEntries(
    int64_t step, const model::HeldDirectory& step_dir) {
  const int n = options_.world_size;
  std::vector<CheckpointRankEntries> found(n);
  std::vector<bool> have(n, false);
  int missing = n;
  const absl::Time deadline = absl::Now() + options_.seal_timeout;
  absl::Duration poll = kFirstPoll;
  std::string why_ending;  // the rank that left the run (options.peer_left), once seen
  while (true) {
    const int missing_before = missing;
    for (int r = 0; r < n; ++r) {
      if (have[r]) continue;
      const std::string name = RankEntriesFileName(r);
      const std::string path = step_dir.PathOf(name);
      if (step_dir.KindOf(name) == model::HeldDirectory::Kind::kMissing) continue;
      // Each entries file is written atomically: one that is there is complete.
      absl::StatusOr<std::string> json = step_dir.ReadFile(name, model::kMaxManifestBytes);
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
    auto cannot_seal = [&] {
      std::vector<int> late;
      for (int r = 0; r < n; ++r) {
        if (!have[r]) late.push_back(r);
      }
      return absl::StrCat("checkpoint step ", step, ": rank 0 cannot seal ", step_dir.path(),
                          ": no entries from rank", late.size() > 1 ? "s " : " ",
                          absl::StrJoin(late, ", "));
    };
    // A rank that died writes nothing more: not a wait of seal_timeout, which would hold the
    // training thread (its next Submit, or a stopped run's last Finish, joins this one).
    if (options_.peers_failed) {
      absl::Status gone = options_.peers_failed();
      if (absl::IsCancelled(gone)) {
        // This rank was stopped (its transport shut down): the other ranks are stopped too and
        // publish at once if they are alive; a dead one is no longer told apart.
        Abandon(kStoppedSealGrace);
      } else if (!gone.ok()) {
        return absl::Status(gone.code(), absl::StrCat(cannot_seal(), ": ", gone.message()));
      }
    }
    if (options_.peer_left && why_ending.empty()) {
      const std::string left = options_.peer_left();
      if (!left.empty()) {
        why_ending = absl::StrCat(left, " left the run");
        Abandon(options_.left_peer_grace);
      }
    }
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    if (now >= std::min(deadline, abandon_at_)) {
      const std::string what = cannot_seal();
      if (now >= abandon_at_) {
        return absl::AbortedError(
            absl::StrCat(what, " before the run ended",
                         why_ending.empty() ? "" : absl::StrCat(" (", why_ending, ")"),
                         "; `latest` still names the previous sealed step"));
      }
      return absl::DeadlineExceededError(absl::StrCat(
          what, " within ", absl::FormatDuration(options_.seal_timeout),
          " (their files are not all durable); `latest` still names the previous sealed step"));
    }
    poll = missing < missing_before ? kFirstPoll : std::min(2 * poll, kLongestPoll);
    changed_.WaitWithTimeout(&mu_, std::min(poll, std::min(deadline, abandon_at_) - now));
  }
  RankEntries all;
  for (CheckpointRankEntries& entries : found) {
    if (!entries.skipped().empty()) {
      absl::StrAppend(&all.skipped, all.skipped.empty() ? "" : "; ", "rank ", entries.rank(), ": ",
                      entries.skipped());
    }
    for (ShardFileEntry& entry : *entries.mutable_files()) all.files.push_back(std::move(entry));
  }
  return all;
}

absl::Status VerifySealedStep(const std::string& step_dir) {
  using Kind = model::HeldDirectory::Kind;
  absl::StatusOr<model::HeldDirectory> dir = model::OpenStepDirectory(step_dir);
  if (!dir.ok()) return absl::DataLossError(dir.status().message());
  // One worker's steps of format version 1 have no checksums to verify; their loader refuses
  // them saying how to carry them over.
  if (dir->KindOf(kManifestFileName) == Kind::kMissing &&
      dir->KindOf(model::kOptimizerFileName) == Kind::kFile) {
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> json = dir->ReadFile(kManifestFileName, model::kMaxManifestBytes);
  if (!json.ok()) {
    return absl::DataLossError(
        absl::StrCat(kManifestFileName, " is unreadable: ", json.status().message()));
  }
  CheckpointManifest manifest;
  if (absl::Status s = FromJson(*json, &manifest); !s.ok()) {
    return absl::DataLossError(absl::StrCat(kManifestFileName, " does not parse: ", s.message()));
  }
  RETURN_IF_ERROR(VerifyManifestChecksum(*json, manifest.version(), kManifestFileName));
  const bool xxh3 = manifest.checksum() == ChecksumName(ChecksumKind::kXxh3_64);
  if (!xxh3 && manifest.checksum() != ChecksumName(ChecksumKind::kFnv1a64)) {
    return absl::DataLossError(absl::StrCat(kManifestFileName, ": unknown checksum \"",
                                            model::QuoteBytes(manifest.checksum()), "\""));
  }
  const ChecksumKind kind = xxh3 ? ChecksumKind::kXxh3_64 : ChecksumKind::kFnv1a64;
  for (const ShardFileEntry& entry : manifest.files()) {
    const std::string& name = entry.name();
    if (!model::IsPlainFileName(name)) {
      return absl::DataLossError(absl::StrCat(kManifestFileName, ": entry \"",
                                              model::QuoteBytes(name),
                                              "\" is not a plain file name (refused unopened)"));
    }
    int64_t size = 0;
    absl::StatusOr<int> fd = dir->OpenFile(name, -1, &size);
    if (!fd.ok()) {
      return absl::DataLossError(absl::StrCat(
          name,
          absl::IsNotFound(fd.status()) ? ": missing" : absl::StrCat(": ", fd.status().message())));
    }
    // The size first: a file of another size is never read (a planted 4 GB one included).
    if (size != entry.bytes()) {
      close(*fd);
      return absl::DataLossError(
          absl::StrCat(name, ": ", size, " bytes, the manifest says ", entry.bytes()));
    }
    absl::StatusOr<uint64_t> checksum = ChecksumOfFile(*fd, kind);
    close(*fd);
    if (!checksum.ok()) return absl::DataLossError(absl::StrCat(name, ": unreadable"));
    if (ChecksumHex(*checksum) != (xxh3 ? entry.xxh3_64() : entry.fnv1a64())) {
      return absl::DataLossError(absl::StrCat(name, ": checksum differs"));
    }
  }
  return absl::OkStatus();
}

absl::Status SetAsideDamagedSteps(const std::string& dir, const std::vector<std::string>& damaged) {
  if (damaged.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const model::HeldDirectory job, model::HeldDirectory::Open(dir));
  for (const std::string& step_dir : damaged) {
    const size_t slash = step_dir.rfind('/');
    if (slash == std::string::npos || step_dir.substr(0, slash) != job.path()) continue;
    const std::string name = step_dir.substr(slash + 1);
    const std::string aside = absl::StrCat("damaged-", name);
    std::string target = aside;
    for (int n = 2; job.KindOf(target) != model::HeldDirectory::Kind::kMissing; ++n) {
      target = absl::StrCat(aside, "-", n);
    }
    RETURN_IF_ERROR(Annotate(job.Rename(name, target),
                             absl::StrCat("cannot set the damaged step ", step_dir, " aside")));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> PrepareJobDirectory(const std::string& dir,
                                                const std::vector<std::string>& damaged,
                                                const model::RunClaim& run) {
  ASSIGN_OR_RETURN(const model::HeldDirectory job, model::HeldDirectory::Create(dir));
  RETURN_IF_ERROR(model::ClaimRun(job, run));
  RETURN_IF_ERROR(SetAsideDamagedSteps(dir, damaged));
  return model::RemoveOrphans(job);
}

}  // namespace dtrain::parallel
