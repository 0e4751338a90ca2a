// The background checkpoint writer as a specification: every rank's files land durably with
// the checksums of their bytes, rank 0 seals only once every rank of the run published its
// entries (never an earlier run's), training is not held up meanwhile, failures name the step,
// rank and file and leave `latest` alone; and resuming falls back from a damaged newest step.
#include "worker/parallel/checkpoint_writer.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/files.h"
#include "common/job_paths.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "worker/model/checkpoint_dir.h"

namespace dtrain::parallel {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

std::string FreshDir(const std::string& name) {
  const std::string dir = AbsolutePath(absl::StrCat(::testing::TempDir(), name, "-", getpid()));
  EXPECT_TRUE(MakeDirectories(dir).ok());
  return dir;
}

std::string StepDir(const std::string& dir, int64_t step) {
  return absl::StrCat(dir, "/", StepDirName(step));
}

std::string Latest(const std::string& dir) {
  absl::StatusOr<std::string> s = ReadFileToString(absl::StrCat(dir, "/", kLatestFileName));
  return s.ok() ? *s : "(none)";
}

// Rank `rank`'s one file of step `step`: "model-r<rank>.safetensors" of a few KiB.
std::vector<PendingFile> FilesOf(int rank, int64_t step) {
  PendingFile f;
  f.name = absl::StrCat("model-r", rank, ".safetensors");
  f.bytes = std::string(4096 + rank, static_cast<char>('a' + rank + step));
  f.entry.set_kind("model");
  f.entry.set_pp_rank(rank);
  return {f};
}

// What SealStep does, minus validating a layout: the manifest from every entry, then latest.
struct Sealer {
  std::string dir;
  std::vector<std::vector<ShardFileEntry>> sealed;  // per call

  absl::Status operator()(int64_t step, std::vector<ShardFileEntry> entries) {
    CheckpointManifest m;
    m.set_step(step);
    m.set_checksum("xxh3_64");
    for (const ShardFileEntry& e : entries) *m.add_files() = e;
    sealed.push_back(std::move(entries));
    std::string json;
    EXPECT_TRUE(google::protobuf::util::MessageToJsonString(m, &json).ok());
    absl::Status s =
        WriteFileAtomically(absl::StrCat(StepDir(dir, step), "/", kManifestFileName), json);
    if (!s.ok()) return s;
    return model::PointLatestAt(dir, step);
  }
};

CheckpointWriterOptions Options(const std::string& dir, int rank, int world, Sealer* sealer) {
  CheckpointWriterOptions o;
  o.dir = dir;
  o.rank = rank;
  o.world_size = world;
  o.run_token = "run-1";
  o.seal_timeout = absl::Seconds(10);
  if (sealer != nullptr) {
    o.seal = [sealer](const model::HeldDirectory&, int64_t s, auto e) { return (*sealer)(s, e); };
  }
  return o;
}

TEST(CheckpointWriter, EveryRankWritesRankZeroSealsWithEveryEntry) {
  const std::string dir = FreshDir("four_ranks");
  Sealer sealer{dir};
  std::vector<std::unique_ptr<CheckpointWriter>> ranks;
  for (int r = 0; r < 4; ++r) {
    ranks.push_back(std::make_unique<CheckpointWriter>(Options(dir, r, 4, &sealer)));
  }
  // Rank 0 first: its writer waits for the others while "training" goes on.
  for (int r = 0; r < 4; ++r) ASSERT_TRUE(ranks[r]->Submit(10, FilesOf(r, 10), 0.0).ok());
  std::vector<CheckpointWritten> done;
  for (int r = 3; r >= 0; --r) {
    absl::StatusOr<std::vector<CheckpointWritten>> w = ranks[r]->Finish();
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_THAT(*w, SizeIs(1));
    EXPECT_EQ((*w)[0].step, 10);
    EXPECT_EQ((*w)[0].dir, StepDir(dir, 10));
    EXPECT_EQ((*w)[0].sealed, r == 0) << "rank " << r;
  }
  ASSERT_THAT(sealer.sealed, SizeIs(1));
  ASSERT_THAT(sealer.sealed[0], SizeIs(4));  // rank order
  for (int r = 0; r < 4; ++r) {
    const ShardFileEntry& e = sealer.sealed[0][r];
    const std::string bytes = FilesOf(r, 10)[0].bytes;
    EXPECT_EQ(e.name(), absl::StrCat("model-r", r, ".safetensors"));
    EXPECT_EQ(e.pp_rank(), r);
    EXPECT_EQ(e.bytes(), static_cast<int64_t>(bytes.size()));
    EXPECT_EQ(e.xxh3_64(), absl::StrFormat("%016x", ShardChecksum(bytes)));
    EXPECT_EQ(*ReadFileToString(absl::StrCat(StepDir(dir, 10), "/", e.name())), bytes);
  }
  EXPECT_EQ(Latest(dir), "step_00000010\n");
  EXPECT_TRUE(VerifySealedStep(StepDir(dir, 10)).ok());
}

TEST(CheckpointWriter, TrainingGoesOnWhileRankZeroWaitsForTheOthers) {
  const std::string dir = FreshDir("goes_on");
  Sealer sealer{dir};
  CheckpointWriter rank0(Options(dir, 0, 2, &sealer));
  CheckpointWriter rank1(Options(dir, 1, 2, &sealer));
  ASSERT_TRUE(rank0.Submit(5, FilesOf(0, 5), 0.0).ok());  // returns at once
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  absl::StatusOr<std::vector<CheckpointWritten>> none = rank0.TakeFinished();
  ASSERT_TRUE(none.ok());
  EXPECT_THAT(*none, IsEmpty());  // not sealed: rank 1 has written nothing
  EXPECT_EQ(Latest(dir), "(none)");
  ASSERT_TRUE(rank1.Submit(5, FilesOf(1, 5), 0.0).ok());
  absl::StatusOr<std::vector<CheckpointWritten>> sealed = rank0.Finish();
  ASSERT_TRUE(sealed.ok()) << sealed.status();
  ASSERT_THAT(*sealed, SizeIs(1));
  EXPECT_TRUE((*sealed)[0].sealed);
  EXPECT_EQ(Latest(dir), "step_00000005\n");
}

TEST(CheckpointWriter, OneInFlightTheNextWaitsAndCountsTheWait) {
  const std::string dir = FreshDir("one_in_flight");
  Sealer sealer{dir};
  CheckpointWriter rank0(Options(dir, 0, 2, &sealer));
  CheckpointWriter rank1(Options(dir, 1, 2, &sealer));
  ASSERT_TRUE(rank0.Submit(1, FilesOf(0, 1), 0.0).ok());
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ASSERT_TRUE(rank1.Submit(1, FilesOf(1, 1), 0.0).ok());
  });
  // Step 2 cannot start before step 1 is sealed, ~200 ms from now.
  ASSERT_TRUE(rank0.Submit(2, FilesOf(0, 2), 0.25).ok());
  late.join();
  ASSERT_TRUE(rank1.Submit(2, FilesOf(1, 2), 0.0).ok());
  absl::StatusOr<std::vector<CheckpointWritten>> done = rank0.Finish();
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_THAT(*done, SizeIs(2));
  EXPECT_EQ((*done)[0].step, 1);
  EXPECT_EQ((*done)[1].step, 2);
  EXPECT_GE((*done)[1].blocked_seconds, 0.25 + 0.1);  // the snapshot plus the wait
  EXPECT_EQ(Latest(dir), "step_00000002\n");
  EXPECT_FALSE(rank0.Submit(2, FilesOf(0, 2), 0.0).ok());  // in order only
}

TEST(CheckpointWriter, ForegroundReturnsOnceSealed) {
  const std::string dir = FreshDir("foreground");
  Sealer sealer{dir};
  CheckpointWriterOptions o = Options(dir, 0, 1, &sealer);
  o.background = false;
  CheckpointWriter writer(o);
  ASSERT_TRUE(writer.Submit(3, FilesOf(0, 3), 0.0).ok());
  EXPECT_EQ(Latest(dir), "step_00000003\n");
  absl::StatusOr<std::vector<CheckpointWritten>> done = writer.TakeFinished();
  ASSERT_TRUE(done.ok());
  ASSERT_THAT(*done, SizeIs(1));
  EXPECT_TRUE((*done)[0].sealed);
}

TEST(CheckpointWriter, AnEarlierRunsEntriesAreNotTakenForThisRuns) {
  const std::string dir = FreshDir("stale");
  Sealer sealer{dir};
  {  // An earlier run's rank 1 wrote step 7, whose rank 0 never sealed it.
    CheckpointWriterOptions old = Options(dir, 1, 2, nullptr);
    old.run_token = "run-0";
    CheckpointWriter rank1(old);
    ASSERT_TRUE(rank1.Submit(7, FilesOf(1, 6), 0.0).ok());
    ASSERT_TRUE(rank1.Finish().ok());
  }
  CheckpointWriterOptions o = Options(dir, 0, 2, &sealer);
  o.seal_timeout = absl::Milliseconds(100);
  CheckpointWriter rank0(o);
  ASSERT_TRUE(rank0.Submit(7, FilesOf(0, 7), 0.0).ok());
  absl::StatusOr<std::vector<CheckpointWritten>> done = rank0.Finish();
  EXPECT_EQ(done.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(done.status().message(), HasSubstr("checkpoint step 7: rank 0 cannot seal"));
  EXPECT_THAT(done.status().message(), HasSubstr("no entries from rank 1 within 100ms"));
  EXPECT_THAT(sealer.sealed, IsEmpty());
}

// A run frozen in the middle of a checkpoint (SIGSTOP, a paused VM) and woken after its job was
// recovered elsewhere: the new run claimed the directory meanwhile, so the old one seals
// nothing, moves no `latest` and writes no later step; the new run writes the step itself.
TEST(CheckpointWriter, ARunReplacedWhileFrozenWritesNothingMore) {
  const std::string dir = FreshDir("replaced");
  Sealer sealer{dir};
  const model::RunClaim old_run{0, "run-0"}, new_run{1, "run-1"};
  ASSERT_TRUE(PrepareJobDirectory(dir, {}, old_run).ok());
  CheckpointWriterOptions o = Options(dir, 0, 1, &sealer);
  o.run_token = old_run.token;
  o.run_attempt = old_run.attempt;
  o.test_only_before_seal = [&](int64_t step) {  // frozen here while the job is recovered
    if (step == 20) {
      ASSERT_TRUE(PrepareJobDirectory(dir, {}, new_run).ok());
    }
  };
  CheckpointWriter old_writer(o);
  ASSERT_TRUE(old_writer.Submit(10, FilesOf(0, 10), 0.0).ok());
  ASSERT_TRUE(old_writer.Finish().ok());
  ASSERT_TRUE(old_writer.Submit(20, FilesOf(0, 20), 0.0).ok());
  const absl::Status refused = old_writer.Finish().status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(refused.message(),
              HasSubstr("checkpoint step 20, rank 0: not sealed: job directory " + dir +
                        " is written by another run (attempt 1, run run-1), not by this one "
                        "(attempt 0, run run-0)"));
  EXPECT_THAT(sealer.sealed, SizeIs(1));
  EXPECT_EQ(Latest(dir), "step_00000010\n");
  // Nothing later either: a writer of the old run refuses before it writes a file.
  o.test_only_before_seal = nullptr;
  CheckpointWriter old_again(o);
  ASSERT_TRUE(old_again.Submit(30, FilesOf(0, 30), 0.0).ok());
  EXPECT_EQ(old_again.Finish().status().code(), absl::StatusCode::kAborted);
  struct stat st;
  EXPECT_NE(stat(StepDir(dir, 30).c_str(), &st), 0);
  // The new run writes step 20 over the old run's unsealed files, and seals it.
  CheckpointWriterOptions n = Options(dir, 0, 1, &sealer);
  n.run_token = new_run.token;
  n.run_attempt = new_run.attempt;
  CheckpointWriter new_writer(n);
  ASSERT_TRUE(new_writer.Submit(20, FilesOf(0, 20), 0.0).ok());
  ASSERT_TRUE(new_writer.Finish().ok());
  EXPECT_EQ(Latest(dir), "step_00000020\n");
  // And the old run, once more at its start, cannot take the directory back.
  EXPECT_EQ(PrepareJobDirectory(dir, {}, old_run).status().code(), absl::StatusCode::kAborted);
}

TEST(CheckpointWriter, SealTimeoutLeavesThePreviousStepLatest) {
  const std::string dir = FreshDir("timeout");
  Sealer sealer{dir};
  CheckpointWriterOptions o = Options(dir, 0, 3, &sealer);
  o.seal_timeout = absl::Milliseconds(100);
  CheckpointWriter rank0(o);
  CheckpointWriter rank1(Options(dir, 1, 3, &sealer));
  CheckpointWriter rank2(Options(dir, 2, 3, &sealer));
  ASSERT_TRUE(rank0.Submit(10, FilesOf(0, 10), 0.0).ok());
  ASSERT_TRUE(rank1.Submit(10, FilesOf(1, 10), 0.0).ok());
  ASSERT_TRUE(rank2.Submit(10, FilesOf(2, 10), 0.0).ok());
  ASSERT_TRUE(rank0.Finish().ok());
  ASSERT_TRUE(rank1.Submit(20, FilesOf(1, 20), 0.0).ok());  // rank 2 never writes step 20
  ASSERT_TRUE(rank0.Submit(20, FilesOf(0, 20), 0.0).ok());
  absl::StatusOr<std::vector<CheckpointWritten>> done = rank0.Finish();
  EXPECT_EQ(done.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(done.status().message(), HasSubstr("no entries from rank 2 within"));
  EXPECT_EQ(Latest(dir), "step_00000010\n");
  struct stat st;
  EXPECT_NE(stat(absl::StrCat(StepDir(dir, 20), "/", kManifestFileName).c_str(), &st), 0);
  // The failure stays: the next checkpoint is refused with it.
  EXPECT_EQ(rank0.Submit(30, FilesOf(0, 30), 0.0).code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(CheckpointWriter, AbandonStopsRankZeroWaitingAtOnce) {
  const std::string dir = FreshDir("abandon");
  Sealer sealer{dir};
  CheckpointWriter rank0(Options(dir, 0, 2, &sealer));  // 10 s seal timeout
  ASSERT_TRUE(rank0.Submit(4, FilesOf(0, 4), 0.0).ok());
  const auto start = std::chrono::steady_clock::now();
  rank0.Abandon(absl::ZeroDuration());
  absl::StatusOr<std::vector<CheckpointWritten>> done = rank0.Finish();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(done.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(done.status().message(), HasSubstr("no entries from rank 1 before the run ended"));
  EXPECT_EQ(Latest(dir), "(none)");
}

TEST(CheckpointWriter, ADeadRankStopsRankZeroWaitingAtOnce) {
  // Rank 1 died before publishing step 4: the next Submit (which joins step 4 on the training
  // thread) fails with the peer's error at once, not after the seal timeout.
  const std::string dir = FreshDir("dead_rank");
  Sealer sealer{dir};
  std::atomic<bool> dead{false};
  CheckpointWriterOptions o = Options(dir, 0, 2, &sealer);  // 10 s seal timeout
  o.peers_failed = [&dead] {
    return dead ? absl::UnavailableError("rank 1 (worker w2 at 10.0.0.2:7070): its stream broke")
                : absl::OkStatus();
  };
  CheckpointWriter rank0(o);
  ASSERT_TRUE(rank0.Submit(4, FilesOf(0, 4), 0.0).ok());
  absl::SleepFor(absl::Milliseconds(20));
  const auto start = std::chrono::steady_clock::now();
  dead = true;
  absl::Status next = rank0.Submit(8, FilesOf(0, 8), 0.0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(next.code(), absl::StatusCode::kUnavailable) << next;
  EXPECT_THAT(next.message(), HasSubstr("step 4: rank 0 cannot seal"));
  EXPECT_THAT(next.message(), HasSubstr("no entries from rank 1: rank 1 (worker w2 at"));
  EXPECT_EQ(Latest(dir), "(none)");
}

// Rank 0 of two submits step 4 alone and finishes within 3 s (not the 10 s seal timeout),
// ABORTED with `want` in its message; nothing is sealed.
void ExpectRankZeroAbortsWithinSeconds(const CheckpointWriterOptions& o, const std::string& dir,
                                       const std::string& want) {
  CheckpointWriter rank0(o);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(rank0.Submit(4, FilesOf(0, 4), 0.0).ok());
  absl::StatusOr<std::vector<CheckpointWritten>> done = rank0.Finish();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_EQ(done.status().code(), absl::StatusCode::kAborted) << done.status();
  EXPECT_THAT(done.status().message(), HasSubstr(want));
  EXPECT_EQ(Latest(dir), "(none)");
}

TEST(CheckpointWriter, AStoppedRankZeroWaitsForTheOthersOnlyASecond) {
  // This rank's transport was shut down (Cancelled): a live peer publishes within moments, a
  // dead one never, and the two are no longer told apart.
  const std::string dir = FreshDir("stopped_rank");
  Sealer sealer{dir};
  CheckpointWriterOptions o = Options(dir, 0, 2, &sealer);  // 10 s seal timeout
  o.peers_failed = [] { return absl::CancelledError("rank 0's transport was shut down"); };
  ExpectRankZeroAbortsWithinSeconds(o, dir, "no entries from rank 1 before the run ended");
}

TEST(CheckpointWriter, APeerThatLeftIsWaitedForOnlyItsGraceAndNamed) {
  // Rank 1 closed its stream (seal_watch.h) and died before publishing: left_peer_grace, not
  // the 10 s seal timeout.
  const std::string dir = FreshDir("left_rank");
  Sealer sealer{dir};
  CheckpointWriterOptions o = Options(dir, 0, 2, &sealer);  // 10 s seal timeout
  o.peer_left = [] { return std::string("rank 1 (worker w2 at 10.0.0.2:7070)"); };
  o.left_peer_grace = absl::Milliseconds(300);
  ExpectRankZeroAbortsWithinSeconds(o, dir,
                                    "no entries from rank 1 before the run ended (rank 1 (worker "
                                    "w2 at 10.0.0.2:7070) left the run)");
}

TEST(CheckpointWriter, ALeftPeerWhoseEntriesShowWithinTheGraceIsSealed) {
  const std::string dir = FreshDir("left_publishes");
  Sealer sealer{dir};
  CheckpointWriterOptions o = Options(dir, 0, 2, &sealer);
  o.peer_left = [] { return std::string("rank 1"); };
  o.left_peer_grace = absl::Seconds(5);
  CheckpointWriter rank0(o);
  CheckpointWriter rank1(Options(dir, 1, 2, &sealer));
  ASSERT_TRUE(rank0.Submit(4, FilesOf(0, 4), 0.0).ok());
  absl::SleepFor(absl::Milliseconds(200));
  ASSERT_TRUE(rank1.Submit(4, FilesOf(1, 4), 0.0).ok());
  absl::StatusOr<std::vector<CheckpointWritten>> done = rank0.Finish();
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(Latest(dir), "step_00000004\n");
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// While a seal waits for a slow rank, rank 0 looks (its peers, the entries files) every 2 ms
// at first, then backs off to every 50 ms: about 25 looks in the first second, not 500. Printed:
// the process's CPU over that second (docs/PERFORMANCE.md).
TEST(CheckpointWriter, ASealWaitingForASlowRankBacksOff) {
  const std::string dir = FreshDir("backoff");
  Sealer sealer{dir};
  CheckpointWriterOptions o = Options(dir, 0, 4, &sealer);
  std::atomic<int> looks{0};
  o.peers_failed = [&looks] {
    ++looks;
    return absl::OkStatus();
  };
  CheckpointWriter rank0(o);
  std::vector<std::unique_ptr<CheckpointWriter>> others;
  for (int r = 1; r < 4; ++r) {
    others.push_back(std::make_unique<CheckpointWriter>(Options(dir, r, 4, &sealer)));
  }
  ASSERT_TRUE(rank0.Submit(4, FilesOf(0, 4), 0.0).ok());
  absl::SleepFor(absl::Milliseconds(100));  // rank 0's own files written, its wait begun
  const int looks_before = looks.load();
  const double cpu_before = CpuSeconds();
  const auto start = std::chrono::steady_clock::now();
  absl::SleepFor(absl::Seconds(1));
  const double cpu = CpuSeconds() - cpu_before;
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int looked = looks.load() - looks_before;
  std::printf("seal wait of %.2f s for 3 ranks: %d looks, %.1f ms of CPU\n", waited, looked,
              cpu * 1e3);
  EXPECT_LE(looked, 30);  // 50 ms apart (at most: a loaded machine wakes it later, not sooner)
  EXPECT_GE(looked, 1);
  // The slow ranks publish: sealed after at most one more poll.
  for (int r = 1; r < 4; ++r) ASSERT_TRUE(others[r - 1]->Submit(4, FilesOf(r, 4), 0.0).ok());
  absl::StatusOr<std::vector<CheckpointWritten>> done = rank0.Finish();
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(Latest(dir), "step_00000004\n");
}

TEST(CheckpointWriter, WriteFailureNamesStepRankAndFile) {
  const std::string dir = FreshDir("write_failure");
  Sealer sealer{dir};
  CheckpointWriter writer(Options(dir, 0, 1, &sealer));
  ASSERT_TRUE(writer.Submit(1, FilesOf(0, 1), 0.0).ok());
  ASSERT_TRUE(writer.Finish().ok());
  // A directory where step 2's file must go: the rename over it fails.
  ASSERT_TRUE(MakeDirectories(absl::StrCat(StepDir(dir, 2), "/model-r0.safetensors/x")).ok());
  ASSERT_TRUE(writer.Submit(2, FilesOf(0, 2), 0.0).ok());
  absl::StatusOr<std::vector<CheckpointWritten>> done = writer.Finish();
  ASSERT_FALSE(done.ok());
  EXPECT_THAT(done.status().message(),
              HasSubstr("checkpoint step 2, rank 0, file model-r0.safetensors: cannot rename"));
  EXPECT_EQ(Latest(dir), "step_00000001\n");
  EXPECT_THAT(sealer.sealed, SizeIs(1));
}

TEST(CheckpointWriter, ASealedStepIsNeverWrittenAgain) {
  const std::string dir = FreshDir("sealed_again");
  Sealer sealer{dir};
  {
    CheckpointWriter first(Options(dir, 0, 1, &sealer));
    ASSERT_TRUE(first.Submit(6, FilesOf(0, 6), 0.0).ok());
    ASSERT_TRUE(first.Finish().ok());
  }
  CheckpointWriter second(Options(dir, 0, 1, &sealer));
  ASSERT_TRUE(second.Submit(6, FilesOf(0, 99), 0.0).ok());
  absl::StatusOr<std::vector<CheckpointWritten>> done = second.Finish();
  EXPECT_EQ(done.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(done.status().message(), HasSubstr("checkpoint step 6, rank 0: will not overwrite"));
  EXPECT_TRUE(VerifySealedStep(StepDir(dir, 6)).ok());
}

// Three sealed steps (10, 20, 30) of one rank, `latest` naming 30.
std::string ThreeSealedSteps(const std::string& name) {
  const std::string dir = FreshDir(name);
  Sealer sealer{dir};
  CheckpointWriter writer(Options(dir, 0, 1, &sealer));
  for (int64_t step : {10, 20, 30}) {
    EXPECT_TRUE(writer.Submit(step, FilesOf(0, step), 0.0).ok());
    EXPECT_TRUE(writer.Finish().ok());
  }
  return dir;
}

void Corrupt(const std::string& path) {
  std::string bytes = *ReadFileToString(path);
  bytes[100] ^= 1;
  ASSERT_TRUE(WriteFileAtomically(path, bytes).ok());
}

TEST(VerifySealedStep, NamesTheDamage) {
  const std::string dir = ThreeSealedSteps("verify");
  Corrupt(absl::StrCat(StepDir(dir, 30), "/model-r0.safetensors"));
  EXPECT_EQ(VerifySealedStep(StepDir(dir, 30)),
            absl::DataLossError("model-r0.safetensors: checksum differs"));
  ASSERT_TRUE(
      WriteFileAtomically(absl::StrCat(StepDir(dir, 20), "/model-r0.safetensors"), "short").ok());
  EXPECT_EQ(VerifySealedStep(StepDir(dir, 20)),
            absl::DataLossError("model-r0.safetensors: 5 bytes, the manifest says 4096"));
  ASSERT_EQ(unlink(absl::StrCat(StepDir(dir, 10), "/model-r0.safetensors").c_str()), 0);
  EXPECT_EQ(VerifySealedStep(StepDir(dir, 10)),
            absl::DataLossError("model-r0.safetensors: missing"));
}

TEST(ResolveCheckpoint, IntactNewestStepNeedsNoNote) {
  const std::string dir = ThreeSealedSteps("resolve_intact");
  absl::StatusOr<model::CheckpointStep> c = model::ResolveCheckpoint(dir, VerifySealedStep);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->step, 30);
  EXPECT_EQ(c->note, "");
}

TEST(ResolveCheckpoint, DamagedNewestStepFallsBackToThePreviousAndSaysSo) {
  const std::string dir = ThreeSealedSteps("resolve_fallback");
  Corrupt(absl::StrCat(StepDir(dir, 30), "/model-r0.safetensors"));
  // An unsealed step 40 (a save that did not finish) is never a candidate.
  ASSERT_TRUE(MakeDirectories(StepDir(dir, 40)).ok());
  absl::StatusOr<model::CheckpointStep> c = model::ResolveCheckpoint(dir, VerifySealedStep);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->step, 20);
  EXPECT_EQ(c->step_dir, StepDir(dir, 20));
  EXPECT_EQ(c->note,
            "step_00000030 is damaged (model-r0.safetensors: checksum differs); resuming from "
            "step_00000020");
  // Without a check (dtrain export, a step named directly) nothing is verified.
  EXPECT_EQ(model::ResolveCheckpoint(dir)->step, 30);
  // Nothing was modified: `latest` still names the damaged step, and a second resolve agrees.
  EXPECT_EQ(Latest(dir), "step_00000030\n");
  EXPECT_EQ(model::ResolveCheckpoint(dir, VerifySealedStep)->step, 20);
  EXPECT_THAT(c->damaged, ElementsAre(StepDir(dir, 30)));

  // The run going on from step 20 in this directory sets step 30 aside and seals it again.
  ASSERT_TRUE(SetAsideDamagedSteps(dir, c->damaged).ok());
  Sealer sealer{dir};
  CheckpointWriter writer(Options(dir, 0, 1, &sealer));
  ASSERT_TRUE(writer.Submit(30, FilesOf(0, 30), 0.0).ok());
  ASSERT_TRUE(writer.Finish().ok());
  EXPECT_TRUE(VerifySealedStep(StepDir(dir, 30)).ok());
  EXPECT_EQ(VerifySealedStep(absl::StrCat(dir, "/damaged-step_00000030")),
            absl::DataLossError("model-r0.safetensors: checksum differs"));
  absl::StatusOr<model::CheckpointStep> again = model::ResolveCheckpoint(dir, VerifySealedStep);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->step, 30);
  EXPECT_EQ(again->note, "");
}

// Step 30 sealed, then the seal cut short before `latest` moved: step 30 is the newest.
TEST(ResolveCheckpoint, AStepSealedAfterLatestLastMovedIsTheNewest) {
  const std::string dir = ThreeSealedSteps("resolve_above_latest");
  ASSERT_TRUE(model::PointLatestAt(dir, 20).ok());
  absl::StatusOr<model::CheckpointStep> c = model::ResolveCheckpoint(dir, VerifySealedStep);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->step, 30);
  EXPECT_EQ(c->note,
            "resuming from step_00000030, sealed after latest last moved (it names "
            "step_00000020)");
  EXPECT_THAT(c->damaged, IsEmpty());
  // Damaged, it is skipped and listed to be set aside like any other.
  Corrupt(absl::StrCat(StepDir(dir, 30), "/model-r0.safetensors"));
  c = model::ResolveCheckpoint(dir, VerifySealedStep);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->step, 20);
  EXPECT_EQ(c->note,
            "step_00000030 is damaged (model-r0.safetensors: checksum differs); resuming from "
            "step_00000020");
  EXPECT_THAT(c->damaged, ElementsAre(StepDir(dir, 30)));
}

TEST(SetAsideDamagedSteps, LeavesOtherDirectoriesAloneAndNeverOverwrites) {
  const std::string dir = ThreeSealedSteps("set_aside");
  const std::string other = ThreeSealedSteps("set_aside_other");
  ASSERT_TRUE(SetAsideDamagedSteps(dir, {StepDir(other, 30)}).ok());
  EXPECT_TRUE(VerifySealedStep(StepDir(other, 30)).ok());  // not in `dir`: untouched
  ASSERT_TRUE(MakeDirectories(absl::StrCat(dir, "/damaged-step_00000030")).ok());
  ASSERT_TRUE(SetAsideDamagedSteps(dir, {StepDir(dir, 30)}).ok());
  EXPECT_TRUE(VerifySealedStep(absl::StrCat(dir, "/damaged-step_00000030-2")).ok());
  EXPECT_EQ(model::ResolveCheckpoint(dir, VerifySealedStep)->note,
            "step_00000030 is damaged (missing); resuming from step_00000020");
}

TEST(ResolveCheckpoint, EverySealedStepDamagedIsDataLossNamingEach) {
  const std::string dir = ThreeSealedSteps("resolve_none");
  for (int64_t step : {10, 20, 30}) {
    Corrupt(absl::StrCat(StepDir(dir, step), "/model-r0.safetensors"));
  }
  absl::StatusOr<model::CheckpointStep> c = model::ResolveCheckpoint(dir, VerifySealedStep);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(c.status().message(),
              HasSubstr("step_00000030 is damaged (model-r0.safetensors: checksum differs), "
                        "step_00000020 is damaged (model-r0.safetensors: checksum differs), "
                        "step_00000010 is damaged"));
}

TEST(ResolveCheckpoint, MissingNewestStepFallsBack) {
  const std::string dir = ThreeSealedSteps("resolve_missing");
  ASSERT_TRUE(WriteFileAtomically(absl::StrCat(dir, "/", kLatestFileName), "step_00000050\n").ok());
  absl::StatusOr<model::CheckpointStep> c = model::ResolveCheckpoint(dir, VerifySealedStep);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->step, 30);
  EXPECT_EQ(c->note, "step_00000050 is damaged (missing); resuming from step_00000030");
}

}  // namespace
}  // namespace dtrain::parallel

namespace dtrain::parallel {
namespace {

using ::testing::HasSubstr;

void Replace(const std::string& path, const std::string& from, const std::string& to) {
  std::string text = *ReadFileToString(path);
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from << " in " << path;
  ASSERT_TRUE(WriteFileAtomically(path, text.replace(at, from.size(), to)).ok());
}

// A shared checkpoint directory's writer cannot make a resume read outside it, or read a
// planted huge file: each is a damaged step, and the resume falls back past it.
TEST(VerifySealedStep, RefusesEscapingNamesSymlinksAndOversizedFilesUnread) {
  const std::string dir = ThreeSealedSteps("verify_hostile");
  const std::string manifest = absl::StrCat(StepDir(dir, 30), "/", kManifestFileName);
  Replace(manifest, "\"model-r0.safetensors\"", "\"../../etc/shadow\"");
  EXPECT_EQ(VerifySealedStep(StepDir(dir, 30)),
            absl::DataLossError("manifest.json: entry \"../../etc/shadow\" is not a plain file "
                                "name (refused unopened)"));
  // A 4 GiB sparse file in the shard's place: refused by its size, never read.
  const std::string shard = absl::StrCat(StepDir(dir, 20), "/model-r0.safetensors");
  ASSERT_EQ(truncate(shard.c_str(), int64_t{4} << 30), 0);
  EXPECT_EQ(VerifySealedStep(StepDir(dir, 20)),
            absl::DataLossError("model-r0.safetensors: 4294967296 bytes, the manifest says 4096"));
  // A shard that is a symlink (to an identical file) is not followed.
  const std::string good = absl::StrCat(StepDir(dir, 10), "/model-r0.safetensors");
  ASSERT_EQ(rename(good.c_str(), (good + ".real").c_str()), 0);
  ASSERT_EQ(symlink((good + ".real").c_str(), good.c_str()), 0);
  absl::Status s = VerifySealedStep(StepDir(dir, 10));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("is a symbolic link, which a checkpoint never follows"));
  absl::StatusOr<model::CheckpointStep> c = model::ResolveCheckpoint(dir, VerifySealedStep);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDataLoss);
}

TEST(VerifySealedStep, ASymlinkedStepDirectoryIsNeverACandidate) {
  const std::string dir = ThreeSealedSteps("symlinked_step");
  const std::string outside = ThreeSealedSteps("symlinked_step_outside");
  ASSERT_EQ(symlink(StepDir(outside, 30).c_str(), StepDir(dir, 40).c_str()), 0);
  ASSERT_TRUE(model::PointLatestAt(dir, 40).ok());
  absl::StatusOr<model::CheckpointStep> c = model::ResolveCheckpoint(dir, VerifySealedStep);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->step, 30);
  EXPECT_EQ(c->note,
            "step_00000040 is damaged (a symbolic link or special file, never followed); "
            "resuming from step_00000030");
  EXPECT_THAT(VerifySealedStep(StepDir(dir, 40)).message(), HasSubstr("symbolic link"));
}

// `latest` deleted, empty or garbage (non-UTF-8 included): the newest intact sealed step, found
// by scanning, with one note that is valid UTF-8.
TEST(ResolveCheckpoint, AnUnusableLatestFallsBackByScanning) {
  const std::string dir = ThreeSealedSteps("latest_unusable");
  const std::string latest = absl::StrCat(dir, "/", kLatestFileName);
  for (const auto& [contents, said] : std::vector<std::pair<std::string, std::string>>{
           {"", "latest is empty"},
           {"\n  \n", "latest is empty"},
           {std::string("\xff\xfe step_\0\x80", 10),
            "latest holds \"\\xff\\xfe step_\\x00\\x80\", not the name of a step directory"},
           {"step_00000030/../../x", "latest holds \"step_00000030/../../x\", not the name"},
           {"(none)", "latest is missing"},
       }) {
    if (contents == "(none)") {
      ASSERT_EQ(unlink(latest.c_str()), 0);
    } else {
      ASSERT_TRUE(WriteFileAtomically(latest, contents).ok());
    }
    for (const model::StepCheck& check : {model::StepCheck(VerifySealedStep), model::StepCheck()}) {
      absl::StatusOr<model::CheckpointStep> c = model::ResolveCheckpoint(dir, check);
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_EQ(c->step, 30);
      EXPECT_THAT(c->note, HasSubstr(said));
      EXPECT_THAT(c->note, HasSubstr("; resuming from step_00000030, the newest intact sealed "
                                     "step"));
    }
  }
  EXPECT_TRUE(model::HasSealedStep(dir));
  Corrupt(absl::StrCat(StepDir(dir, 30), "/model-r0.safetensors"));
  EXPECT_EQ(model::ResolveCheckpoint(dir, VerifySealedStep)->note,
            "latest is missing, step_00000030 is damaged (model-r0.safetensors: checksum "
            "differs); resuming from step_00000020, the newest intact sealed step");
}

TEST(CheckpointWriter, ADirectorySwappedForASymlinkMidRunKeepsReceivingTheSteps) {
  const std::string parent = FreshDir("swapped");
  const std::string outside = FreshDir("swapped_outside");
  const std::string dir = parent + "/job-000001";
  Sealer sealer{dir};
  CheckpointWriter writer(Options(dir, 0, 1, &sealer));
  ASSERT_TRUE(writer.Submit(10, FilesOf(0, 10), 0.0).ok());
  ASSERT_TRUE(writer.Finish().ok());
  ASSERT_EQ(rename(dir.c_str(), (parent + "/moved").c_str()), 0);
  ASSERT_EQ(symlink(outside.c_str(), dir.c_str()), 0);
  ASSERT_TRUE(writer.Submit(20, FilesOf(0, 20), 0.0).ok());
  // The test's sealer writes by path (the symlink); the writer's own files must not follow it.
  (void)writer.Finish();
  EXPECT_EQ(access((parent + "/moved/step_00000020/model-r0.safetensors").c_str(), F_OK), 0);
  EXPECT_EQ(access((outside + "/step_00000020/model-r0.safetensors").c_str(), F_OK), -1);
}

TEST(PrepareJobDirectory, RemovesOrphansNeverASealedStep) {
  const std::string dir = ThreeSealedSteps("orphans");
  ASSERT_TRUE(WriteFileAtomically(StepDir(dir, 20) + "/model-r0.safetensors.tmp.4242", "x").ok());
  ASSERT_TRUE(MakeDirectories(StepDir(dir, 40)).ok());
  ASSERT_TRUE(WriteFileAtomically(StepDir(dir, 40) + "/model-r0.safetensors.tmp.4242", "x").ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/latest.tmp.4242", "x").ok());
  absl::StatusOr<std::string> said = PrepareJobDirectory(dir, {}, {0, "aaaa00000001"});
  ASSERT_TRUE(said.ok()) << said.status();
  EXPECT_EQ(*said, absl::StrCat("removed 1 unsealed step (step_00000040) and 2 temporary files "
                                "(latest.tmp.4242, step_00000020/model-r0.safetensors.tmp.4242) "
                                "left in ",
                                dir, " by an earlier run that did not finish them"));
  for (int64_t step : {10, 20, 30}) EXPECT_TRUE(VerifySealedStep(StepDir(dir, step)).ok());
  EXPECT_EQ(access(StepDir(dir, 40).c_str(), F_OK), -1);
  EXPECT_EQ(*PrepareJobDirectory(dir, {}, {0, "aaaa00000001"}), "");
}

}  // namespace
}  // namespace dtrain::parallel

namespace dtrain::parallel {
namespace {

std::vector<std::string> StepDirsIn(const std::string& dir) {
  const absl::StatusOr<model::HeldDirectory> held = model::HeldDirectory::Open(dir);
  const absl::StatusOr<std::vector<std::string>> all = held->Names();
  std::vector<std::string> names;
  for (const std::string& name : *all) {
    if (name.rfind("step_", 0) == 0) names.push_back(name);
  }
  return names;
}

// keep_last 2, keep_every 20: after each seal only the newest two sealed steps and the
// milestones remain; an unsealed step and a set-aside damaged one are left to RemoveOrphans.
TEST(CheckpointWriter, RetentionKeepsTheNewestStepsAndMilestones) {
  const std::string dir = FreshDir("retention");
  ASSERT_TRUE(MakeDirectories(dir + "/damaged-step_00000005").ok());
  Sealer sealer{dir};
  CheckpointWriterOptions o = Options(dir, 0, 1, &sealer);
  o.keep_last = 2;
  o.keep_every = 20;
  CheckpointWriter writer(o);
  for (int64_t step = 10; step <= 70; step += 10) {
    ASSERT_TRUE(writer.Submit(step, FilesOf(0, step), 0.0).ok());
    ASSERT_TRUE(writer.Finish().ok());
    if (step == 30) {
      EXPECT_THAT(StepDirsIn(dir), ElementsAre("step_00000020", "step_00000030"));
    }
  }
  EXPECT_THAT(StepDirsIn(dir),
              ElementsAre("step_00000020", "step_00000040", "step_00000060", "step_00000070"));
  EXPECT_EQ(Latest(dir), "step_00000070\n");
  EXPECT_EQ(access((dir + "/damaged-step_00000005").c_str(), F_OK), 0);
  // `latest` naming an older step (a seal cut short) keeps that step too.
  ASSERT_TRUE(model::PointLatestAt(dir, 60).ok());
  absl::StatusOr<std::vector<std::string>> deleted =
      model::PruneSealedSteps(*model::HeldDirectory::Open(dir), 1, 0);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_THAT(*deleted, ElementsAre("step_00000020", "step_00000040"));
  EXPECT_THAT(StepDirsIn(dir), ElementsAre("step_00000060", "step_00000070"));
  EXPECT_EQ(model::PruneSealedSteps(*model::HeldDirectory::Open(dir), 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A step submitted with `keep` (the best validation step) outlives keep_last until a later
// kept step replaces it.
TEST(CheckpointWriter, RetentionKeepsTheLastKeptStep) {
  const std::string dir = FreshDir("retention_keep");
  Sealer sealer{dir};
  CheckpointWriterOptions o = Options(dir, 0, 1, &sealer);
  o.keep_last = 1;
  CheckpointWriter writer(o);
  for (int64_t step = 10; step <= 50; step += 10) {
    ASSERT_TRUE(writer.Submit(step, FilesOf(0, step), 0.0, /*keep=*/step == 20).ok());
    ASSERT_TRUE(writer.Finish().ok());
  }
  EXPECT_THAT(StepDirsIn(dir), ElementsAre("step_00000020", "step_00000050"));
  ASSERT_TRUE(writer.Submit(60, FilesOf(0, 60), 0.0, /*keep=*/true).ok());
  ASSERT_TRUE(writer.Finish().ok());
  ASSERT_TRUE(writer.Submit(70, FilesOf(0, 70), 0.0).ok());
  ASSERT_TRUE(writer.Finish().ok());
  EXPECT_THAT(StepDirsIn(dir), ElementsAre("step_00000060", "step_00000070"));
}

}  // namespace
}  // namespace dtrain::parallel

namespace dtrain::parallel {
namespace {

// A one-worker job without checkpoint.dir leaves its final weights and its claim only: `dtrain
// export` says what the directory is, not that it is an old format.
TEST(ResolveCheckpoint, AJobDirectoryWithOnlyFinalWeightsSaysSo) {
  const std::string dir = FreshDir("final_weights_only");
  ASSERT_TRUE(WriteFileAtomically(dir + "/model.safetensors", "weights").ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/job.json", "{}").ok());
  absl::StatusOr<Manifest> m = ReadManifest(dir);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(m.status().message(),
              HasSubstr(dir + " holds a job's final weights (model.safetensors) but no "
                              "checkpoint step"));
  EXPECT_THAT(m.status().message(), ::testing::Not(HasSubstr("version 1")));
  EXPECT_FALSE(model::HasSealedStep(dir));
}

}  // namespace
}  // namespace dtrain::parallel
