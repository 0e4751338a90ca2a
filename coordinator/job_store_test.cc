#include "coordinator/job_store.h"

#include <sys/stat.h>

#include <sqlite3.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::coordinator {
namespace {

using ::testing::HasSubstr;

JobSpec Spec(const std::string& name) {
  JobSpec spec;
  spec.set_name(name);
  spec.set_dataset("/d.bin");
  spec.set_steps(10);
  return spec;
}

StepMetrics Step(int64_t step, double loss) {
  StepMetrics m;
  m.set_step(step);
  m.set_loss(loss);
  m.set_grad_norm(1.5);
  m.set_learning_rate(1e-3);
  m.set_tokens_per_s(1000);
  m.set_time_unix_ms(step * 10);
  return m;
}

TEST(JobStore, CreateAssignsIncreasingIds) {
  auto store = JobStore::Open(TempDb("ids"));
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<Job> a = (*store)->CreateJob(Spec("a"), "queued", 100);
  absl::StatusOr<Job> b = (*store)->CreateJob(Spec("b"), "queued", 200);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->id(), "job-000001");
  EXPECT_EQ(b->id(), "job-000002");
  EXPECT_EQ(a->state(), QUEUED);
  ASSERT_EQ(a->history_size(), 1);
  EXPECT_EQ(a->history(0).reason(), "queued");
}

TEST(JobStore, UpdateStateAppendsHistoryAndKeepsFinalStatesFinal) {
  auto store = JobStore::Open(TempDb("history"));
  ASSERT_TRUE(store.ok());
  JobStore& s = **store;
  ASSERT_TRUE(s.CreateJob(Spec("a"), "queued", 1).ok());
  Placement placement;
  placement.add_ranks()->set_worker_id("w1");
  ASSERT_TRUE(s.UpdateState("job-000001", PLACING, "placed on w1", 2, &placement).ok());
  ASSERT_TRUE(s.UpdateState("job-000001", RUNNING, "all 1 workers running", 3).ok());
  const std::string output = "/out/model.safetensors";
  ASSERT_TRUE(s.UpdateState("job-000001", SUCCEEDED, "done", 4, nullptr, &output).ok());

  absl::Status again = s.UpdateState("job-000001", FAILED, "late", 5);
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(again.message(), HasSubstr("already ended SUCCEEDED"));
  EXPECT_EQ(s.UpdateState("job-999999", RUNNING, "x", 5).code(), absl::StatusCode::kNotFound);

  absl::StatusOr<Job> job = s.GetJob("job-000001");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), SUCCEEDED);
  EXPECT_EQ(job->reason(), "done");
  EXPECT_EQ(job->output(), output);
  EXPECT_EQ(job->placement().ranks(0).worker_id(), "w1");
  ASSERT_EQ(job->history_size(), 4);
  EXPECT_EQ(job->history(1).state(), PLACING);
  EXPECT_EQ(job->history(3).time_unix_ms(), 4);

  absl::StatusOr<std::vector<HistoryEntry>> after = s.HistoryAfter("job-000001", 2);
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->size(), 2u);
  EXPECT_EQ((*after)[0].seq, 3);
  EXPECT_EQ((*after)[0].change.state(), RUNNING);
}

TEST(JobStore, MetricsAndEvents) {
  auto store = JobStore::Open(TempDb("metrics"));
  ASSERT_TRUE(store.ok());
  JobStore& s = **store;
  ASSERT_TRUE(s.CreateJob(Spec("a"), "queued", 1).ok());
  for (int i = 1; i <= 5; ++i) ASSERT_TRUE(s.AppendMetrics("job-000001", Step(i, 10 - i)).ok());
  ASSERT_TRUE(s.AppendMetrics("job-000001", Step(5, 4.5)).ok());  // reported again: replaced
  EXPECT_EQ(s.AppendMetrics("job-000404", Step(1, 1)).code(), absl::StatusCode::kNotFound);

  absl::StatusOr<std::vector<StepMetrics>> steps = s.MetricsAfter("job-000001", 2);
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 3u);
  EXPECT_EQ((*steps)[0].step(), 3);
  EXPECT_DOUBLE_EQ((*steps)[0].loss(), 7);
  EXPECT_DOUBLE_EQ((*steps)[2].loss(), 4.5);
  EXPECT_EQ(s.MetricsAfter("job-000001", 0, 2)->size(), 2u);
  EXPECT_EQ(s.GetJob("job-000001")->latest().step(), 5);

  EXPECT_EQ(*s.AppendEvent("job-000001", "loaded data", 7), 1);
  EXPECT_EQ(*s.AppendEvent("job-000001", "checkpoint at step 5", 8), 2);
  EXPECT_EQ(s.AppendEvent("job-000404", "x", 1).status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<std::vector<JobEvent>> events = s.EventsFor("job-000001");
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[1].text, "checkpoint at step 5");
  EXPECT_EQ(s.EventsAfter("job-000001", 1)->size(), 1u);
}

TEST(JobStore, ListsNewestFirstAndFindsJobsByState) {
  auto store = JobStore::Open(TempDb("list"));
  ASSERT_TRUE(store.ok());
  JobStore& s = **store;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(s.CreateJob(Spec(absl::StrCat(i)), "q", i).ok());
  ASSERT_TRUE(s.UpdateState("job-000002", PLACING, "p", 10).ok());
  ASSERT_TRUE(s.UpdateState("job-000003", CANCELLED, "c", 10).ok());

  absl::StatusOr<JobPage> page = s.ListJobs(3);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->jobs.size(), 3u);
  EXPECT_EQ(page->jobs[0].id(), "job-000005");
  EXPECT_EQ(page->jobs[0].history_size(), 0);
  EXPECT_EQ(s.ListJobs(0)->jobs.size(), 5u);
  EXPECT_EQ(s.ListJobs(0)->next_before_seq, 0);
  // The next page starts below the last job of this one.
  ASSERT_GT(page->next_before_seq, 0);
  absl::StatusOr<JobPage> older = s.ListJobs(3, {}, page->next_before_seq);
  ASSERT_TRUE(older.ok());
  ASSERT_EQ(older->jobs.size(), 2u);
  EXPECT_EQ(older->jobs[0].id(), "job-000002");
  EXPECT_EQ(older->next_before_seq, 0);

  absl::StatusOr<std::vector<Job>> active = s.JobsInStates({QUEUED, PLACING, RUNNING});
  ASSERT_TRUE(active.ok());
  std::vector<std::string> ids;
  for (const Job& j : *active) ids.push_back(j.id());
  EXPECT_THAT(ids, ::testing::ElementsAre("job-000001", "job-000002", "job-000004", "job-000005"));
  EXPECT_EQ(s.GetJob("job-000404").status().code(), absl::StatusCode::kNotFound);
}

TEST(JobStore, EverythingSurvivesReopen) {
  const std::string path = TempDb("reopen");
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->CreateJob(Spec("a"), "queued", 1).ok());
    ASSERT_TRUE((*store)->CreateJob(Spec("b"), "queued", 2).ok());
    ASSERT_TRUE((*store)->UpdateState("job-000002", PLACING, "p", 3).ok());
    ASSERT_TRUE((*store)->UpdateState("job-000002", RUNNING, "r", 3).ok());
    ASSERT_TRUE((*store)->AppendMetrics("job-000002", Step(1, 5)).ok());
    ASSERT_TRUE((*store)->AppendEvent("job-000002", "hello", 4).ok());
  }
  auto store = JobStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  JobStore& s = **store;
  absl::StatusOr<Job> a = s.GetJob("job-000001");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->state(), QUEUED);
  EXPECT_EQ(a->spec().name(), "a");
  absl::StatusOr<Job> b = s.GetJob("job-000002");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->state(), RUNNING);
  EXPECT_EQ(b->history_size(), 3);
  EXPECT_EQ(s.MetricsAfter("job-000002", 0)->size(), 1u);
  EXPECT_EQ(s.EventsFor("job-000002")->size(), 1u);
  // The id counter continues.
  EXPECT_EQ(s.CreateJob(Spec("c"), "queued", 5)->id(), "job-000003");
}

TEST(JobStore, GarbageFileIsAClearErrorNamingThePath) {
  const std::string path = TempDb("garbage");
  {
    std::ofstream out(path);
    for (int i = 0; i < 200; ++i) out << "this is not an sqlite database, it is a text file\n";
  }
  auto store = JobStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(store.status().message(), HasSubstr(path));
  EXPECT_THAT(store.status().message(), HasSubstr("not a database"));
}

TEST(JobStore, UnopenablePathIsAClearError) {
  const std::string path = "/nonexistent-dir-dtrain/sub/coordinator.db";
  auto store = JobStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr(path));
}

TEST(JobStore, RefusesAnotherProgramsDatabase) {
  const std::string path = TempDb("foreign");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE users (name TEXT)", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto store = JobStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr("not a dtrain coordinator's"));
}

TEST(JobStore, TruncatedDatabaseIsDataLossNotACrash) {
  const std::string path = TempDb("truncated");
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->CreateJob(Spec("a"), "queued", 1).ok());
    for (int i = 1; i <= 400; ++i) {
      ASSERT_TRUE((*store)->AppendMetrics("job-000001", Step(i, 1)).ok());
    }
  }
  ASSERT_EQ(truncate(path.c_str(), 8192), 0);
  auto store = JobStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr(path));
}

TEST(JobStore, ConcurrentReadersSeeConsistentJobs) {
  auto store = JobStore::Open(TempDb("concurrent"));
  ASSERT_TRUE(store.ok());
  JobStore& s = **store;
  ASSERT_TRUE(s.CreateJob(Spec("a"), "queued", 1).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0}, reads{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 4; ++r) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        absl::StatusOr<Job> job = s.GetJob("job-000001");
        // The latest step and the metrics rows are written in one transaction.
        absl::StatusOr<std::vector<StepMetrics>> steps = s.MetricsAfter("job-000001", 0, 100000);
        if (!job.ok() || !steps.ok()) ++bad;
        if (job.ok() && steps.ok() && static_cast<int64_t>(steps->size()) < job->latest().step()) {
          ++bad;
        }
        ++reads;
      }
    });
  }
  for (int i = 1; i <= 50; ++i) ASSERT_TRUE(s.AppendMetrics("job-000001", Step(i, 1)).ok());
  stop = true;
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(s.MetricsAfter("job-000001", 0, 1000)->size(), 50u);
}

TEST(JobStore, ASecondOpenOfTheSameFileIsRefusedNamingTheHolder) {
  const std::string path = TempDb("locked");
  auto first = JobStore::Open(path, "pid 4242 on host a, listening on 0.0.0.0:7070");
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = JobStore::Open(path, "pid 1 on host b");
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("is in use by another coordinator (pid 4242 "
                                                   "on host a, listening on 0.0.0.0:7070)"));
  first->reset();  // closing releases the lock
  EXPECT_TRUE(JobStore::Open(path).ok());
}

// val_loss is kept where a step had an evaluation and absent elsewhere; GetJob summarizes the
// last evaluation and the best (lowest; the earliest of equals).
TEST(JobStore, ValidationLossesAndTheirSummary) {
  auto store = JobStore::Open(TempDb("val_loss"));
  ASSERT_TRUE(store.ok());
  JobStore& s = **store;
  ASSERT_TRUE(s.CreateJob(Spec("a"), "queued", 1).ok());
  EXPECT_FALSE(s.GetJob("job-000001")->has_validation());
  const std::map<int64_t, double> evaluated = {{10, 3.5}, {20, 3.25}, {30, 3.25}, {40, 3.75}};
  for (int i = 1; i <= 45; ++i) {
    StepMetrics m = Step(i, 5);
    if (evaluated.count(i)) m.set_val_loss(evaluated.at(i));
    ASSERT_TRUE(s.AppendMetrics("job-000001", m).ok());
  }
  absl::StatusOr<std::vector<StepMetrics>> steps = s.MetricsAfter("job-000001", 0, 100);
  ASSERT_TRUE(steps.ok());
  for (const StepMetrics& m : *steps) {
    EXPECT_EQ(m.has_val_loss(), evaluated.count(m.step()) == 1) << m.step();
    if (m.has_val_loss()) {
      EXPECT_EQ(m.val_loss(), evaluated.at(m.step()));
    }
  }
  const Job job = *s.GetJob("job-000001");
  EXPECT_EQ(job.validation().step(), 40);
  EXPECT_EQ(job.validation().val_loss(), 3.75);
  EXPECT_EQ(job.validation().best_step(), 20);
  EXPECT_EQ(job.validation().best_val_loss(), 3.25);
}

TEST(JobStore, AVersionOneDatabaseIsMigratedKeepingItsJobs) {
  const std::string path = TempDb("v1");
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, R"sql(
CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT INTO meta VALUES ('schema_version', 1);
CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
  spec BLOB NOT NULL, state INTEGER NOT NULL, reason TEXT NOT NULL,
  submitted_ms INTEGER NOT NULL, placement BLOB, latest BLOB, output TEXT NOT NULL DEFAULT '');
INSERT INTO jobs (id, spec, state, reason, submitted_ms) VALUES ('job-000001', '', 4, 'done', 7);
CREATE TABLE state_changes (job_id TEXT NOT NULL, seq INTEGER NOT NULL, state INTEGER NOT NULL,
  reason TEXT NOT NULL, time_ms INTEGER NOT NULL, PRIMARY KEY (job_id, seq)) WITHOUT ROWID;
CREATE TABLE metrics (job_id TEXT NOT NULL, step INTEGER NOT NULL, loss REAL, grad_norm REAL,
  lr REAL, tokens_per_s REAL, time_ms INTEGER NOT NULL, PRIMARY KEY (job_id, step)) WITHOUT ROWID;
CREATE TABLE events (job_id TEXT NOT NULL, seq INTEGER NOT NULL, text TEXT NOT NULL,
  time_ms INTEGER NOT NULL, PRIMARY KEY (job_id, seq)) WITHOUT ROWID;
INSERT INTO events VALUES ('job-000001', 1, 'an old event', 8);
)sql",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  auto store = JobStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<Job> job = (*store)->GetJob("job-000001");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->reason(), "done");
  EXPECT_EQ(job->started_unix_ms(), 0);
  absl::StatusOr<std::vector<LogEntry>> lines = (*store)->LogsAfter("job-000001", 0, std::nullopt);
  ASSERT_TRUE(lines.ok());
  ASSERT_EQ(lines->size(), 1u);
  EXPECT_EQ((*lines)[0].rank(), -1);
  EXPECT_EQ((*lines)[0].text(), "an old event");
  EXPECT_EQ((*store)->ListJobs(10)->jobs.size(), 1u);  // its summary was filled in
  StepMetrics evaluated = Step(1, 2);                  // the metrics table gained val_loss
  evaluated.set_val_loss(2.5);
  ASSERT_TRUE((*store)->AppendMetrics("job-000001", evaluated).ok());
  EXPECT_EQ((*store)->MetricsAfter("job-000001", 0)->at(0).val_loss(), 2.5);
  // Version 6's table of removals is there.
  PendingDirRemoval removal{"job-000001", "u", "/c/job-000001", "h", "w1", 9};
  EXPECT_EQ(job->owner(), "");  // version 7's owner: nobody's
  ASSERT_TRUE((*store)->DeleteJob("job-000001", &removal).ok());
  EXPECT_EQ((*store)->PendingDirRemovals()->size(), 1u);
}

// A listing shows each job's priority: from its summary, which a change of the spec rewrites
// (SetSpec) and which opening a version-7 database fills for the jobs already there.
// Makes the database at `path` look as an older coordinator left it: `sql` (if any), then its
// schema version set to `version`.
void SetSchemaVersion(const std::string& path, int version, const std::string& sql = "") {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  if (!sql.empty()) {
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  }
  const std::string update =
      absl::StrCat("UPDATE meta SET value = ", version, " WHERE key = 'schema_version'");
  ASSERT_EQ(sqlite3_exec(db, update.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
}

TEST(JobStore, AListingShowsThePriorityAsSetAndAfterAMigration) {
  const std::string path = TempDb("priority");
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    JobSpec spec = Spec("urgent");
    spec.set_priority(5);
    ASSERT_TRUE((*store)->CreateJob(spec, "queued", 100).ok());
    EXPECT_EQ((*store)->ListJobs(10)->jobs.at(0).spec().priority(), 5);
    spec.set_priority(9);
    ASSERT_TRUE((*store)->SetSpec("job-000001", spec).ok());
    EXPECT_EQ((*store)->ListJobs(10)->jobs.at(0).spec().priority(), 9);
  }
  {  // What a version-7 coordinator wrote: a summary without the priority.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    JobSpec old_summary;
    old_summary.set_name("urgent");
    const std::string blob = old_summary.SerializeAsString();
    sqlite3_stmt* update = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, "UPDATE jobs SET summary = ?", -1, &update, nullptr),
              SQLITE_OK);
    sqlite3_bind_blob(update, 1, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
    ASSERT_EQ(sqlite3_step(update), SQLITE_DONE);
    sqlite3_finalize(update);
    sqlite3_close(db);
    SetSchemaVersion(path, 7);
  }
  auto store = JobStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->ListJobs(10)->jobs.at(0).spec().priority(), 9);
}

TEST(JobStore, DrainedWorkersAreKeptBySessionAndAfterAMigration) {
  const std::string path = TempDb("drained");
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->SetDrained("w1", "s1", true, 100).ok());
    ASSERT_TRUE((*store)->SetDrained("w2", "s2", true, 100).ok());
    ASSERT_TRUE((*store)->SetDrained("w2", "s2b", true, 200).ok());  // drained again, a new session
    ASSERT_TRUE((*store)->SetDrained("w3", "s3", true, 100).ok());
    ASSERT_TRUE((*store)->SetDrained("w3", "", false, 300).ok());
  }
  // What a version-8 coordinator wrote: no drained workers table.
  SetSchemaVersion(path, 8, "DROP TABLE drained_workers");
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_TRUE((*store)->DrainedWorkers()->empty());
    ASSERT_TRUE((*store)->SetDrained("w1", "s1", true, 100).ok());
    ASSERT_TRUE((*store)->SetDrained("w2", "s2b", true, 200).ok());
  }
  auto store = JobStore::Open(path);  // reopened: both kept
  ASSERT_TRUE(store.ok()) << store.status();
  const absl::flat_hash_map<std::string, std::string> drained = *(*store)->DrainedWorkers();
  EXPECT_EQ(drained.size(), 2u);
  EXPECT_EQ(drained.at("w1"), "s1");
  EXPECT_EQ(drained.at("w2"), "s2b");
}

// A report's number kept with its line (ReportMark): the highest of the worker's session, reset by
// a new session, kept across a reopen; a version-9 database gains the table.
TEST(JobStore, ReportNumbersAreKeptWithTheirLinesPerSession) {
  const std::string path = TempDb("report_marks");
  auto marks_of = [](JobStore& s) {
    absl::flat_hash_map<std::string, std::pair<std::string, uint64_t>> out;
    const std::vector<ReportMark> marks = *s.ReportMarks();
    for (const ReportMark& m : marks) out[m.worker_id] = {m.session_id, m.seq};
    return out;
  };
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->CreateJob(Spec("a"), "queued", 100).ok());
  }
  SetSchemaVersion(path, 9, "DROP TABLE report_marks");  // what a version-9 coordinator left
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    JobStore& s = **store;
    EXPECT_TRUE(s.ReportMarks()->empty());
    const ReportMark m5{"w1", "s1", 5}, m3{"w1", "s1", 3}, other{"w2", "t1", 9};
    ASSERT_TRUE(s.AppendEvent("job-000001", "five", 1, {0, "w1"}, &m5).ok());
    ASSERT_TRUE(s.AppendEvent("job-000001", "three", 2, {0, "w1"}, &m3).ok());  // not lower
    ASSERT_TRUE(s.AppendEvent("job-000001", "w2's", 3, {1, "w2"}, &other).ok());
    ASSERT_TRUE(s.AppendEvent("job-000001", "unnumbered", 4).ok());
    EXPECT_EQ(marks_of(s)["w1"], std::make_pair(std::string("s1"), uint64_t{5}));
    const ReportMark restarted{"w1", "s2", 1};  // the worker's process restarted
    ASSERT_TRUE(s.AppendEvent("job-000001", "again", 5, {0, "w1"}, &restarted).ok());
    // A line refused (an unknown job) keeps no number.
    const ReportMark refused{"w2", "t1", 10};
    EXPECT_FALSE(s.AppendEvent("job-000404", "nowhere", 6, {1, "w2"}, &refused).ok());
  }
  auto store = JobStore::Open(path);  // reopened: kept
  ASSERT_TRUE(store.ok()) << store.status();
  auto marks = marks_of(**store);
  EXPECT_EQ(marks.size(), 2u);
  EXPECT_EQ(marks["w1"], std::make_pair(std::string("s2"), uint64_t{1}));
  EXPECT_EQ(marks["w2"], std::make_pair(std::string("t1"), uint64_t{9}));
}

TEST(JobStore, DeletingAnEndedJobTakesEveryRowAndKeepsItsRemoval) {
  const std::string path = TempDb("delete");
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    JobStore& s = **store;
    for (const char* name : {"a", "b"}) ASSERT_TRUE(s.CreateJob(Spec(name), "queued", 100).ok());
    const absl::Status running = s.DeleteJob("job-000001");
    EXPECT_EQ(running.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(running.message(), "job-000001 is QUEUED: only an ended job is deleted");
    EXPECT_EQ(s.DeleteJob("job-000009").code(), absl::StatusCode::kNotFound);
    ASSERT_TRUE(s.UpdateState("job-000001", PLACING, "placing", 150).ok());
    ASSERT_TRUE(s.UpdateState("job-000001", RUNNING, "go", 200).ok());
    ASSERT_TRUE(s.AppendMetrics("job-000001", Step(1, 3.0)).ok());
    ASSERT_TRUE(s.AppendEvent("job-000001", "an event", 210).ok());
    CheckpointInfo sealed;
    sealed.set_step(1);
    sealed.set_path("/c/job-000001/step_00000001");
    ASSERT_TRUE(s.AddCheckpoint("job-000001", sealed).ok());
    ASSERT_TRUE(s.UpdateState("job-000001", SUCCEEDED, "done", 300).ok());
    ASSERT_TRUE(s.UpdateState("job-000002", CANCELLED, "no", 400).ok());
    EXPECT_EQ(*s.EndedBefore(350, 10), std::vector<std::string>{"job-000001"});
    EXPECT_EQ(s.EndedBefore(401, 10)->size(), 2u);
    PendingDirRemoval removal{"job-000001", "uid-1", "/c/job-000001", "host-a", "w1", 310};
    ASSERT_TRUE(s.DeleteJob("job-000001", &removal).ok());
  }
  // Every table, read straight from the file: nothing of job-000001 is left.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  for (const char* sql : {"SELECT COUNT(*) FROM jobs WHERE id = 'job-000001'",
                          "SELECT COUNT(*) FROM job_specs WHERE seq = 1",
                          "SELECT COUNT(*) FROM state_changes WHERE job_id = 'job-000001'",
                          "SELECT COUNT(*) FROM metrics WHERE job_id = 'job-000001'",
                          "SELECT COUNT(*) FROM events WHERE job_id = 'job-000001'",
                          "SELECT COUNT(*) FROM checkpoints WHERE job_id = 'job-000001'"}) {
    sqlite3_stmt* stmt = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr), SQLITE_OK) << sql;
    ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int64(stmt, 0), 0) << sql;
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  auto store = JobStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::vector<PendingDirRemoval>> pending = (*store)->PendingDirRemovals();
  ASSERT_TRUE(pending.ok()) << pending.status();
  ASSERT_EQ(pending->size(), 1u);
  EXPECT_EQ((*pending)[0].uid, "uid-1");
  EXPECT_EQ((*pending)[0].host, "host-a");
  EXPECT_EQ((*pending)[0].worker_id, "w1");
  ASSERT_TRUE((*store)->DirRemovalDone("job-000001").ok());
  EXPECT_TRUE((*store)->PendingDirRemovals()->empty());
  EXPECT_TRUE((*store)->GetJob("job-000002").ok());
  EXPECT_EQ((*store)->CreateJob(Spec("c"), "queued", 500)->id(), "job-000003");  // never reused
}

TEST(JobStore, StartAndEndTimesFollowTheStates) {
  auto store = JobStore::Open(TempDb("times"));
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->CreateJob(JobSpec(), "queued", 100, "uid-1").ok());
  ASSERT_TRUE((*store)->UpdateState("job-000001", PLACING, "placed", 150).ok());
  ASSERT_TRUE((*store)->UpdateState("job-000001", RUNNING, "go", 200).ok());
  // A second run (after a recovery) does not move the start.
  ASSERT_TRUE((*store)->UpdateState("job-000001", RECOVERING, "lost w1", 250).ok());
  ASSERT_TRUE((*store)->UpdateState("job-000001", PLACING, "placed again", 260).ok());
  ASSERT_TRUE((*store)->UpdateState("job-000001", RUNNING, "again", 300).ok());
  ASSERT_TRUE((*store)->UpdateState("job-000001", FAILED, "x", 400).ok());
  absl::StatusOr<Job> job = (*store)->GetJob("job-000001");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->uid(), "uid-1");
  EXPECT_EQ(job->started_unix_ms(), 200);
  EXPECT_EQ(job->ended_unix_ms(), 400);
}

TEST(JobStore, RankLinesAreBoundedPerJobOldestDropped) {
  auto store = JobStore::Open(TempDb("log-cap"));
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->CreateJob(JobSpec(), "queued", 1).ok());
  ASSERT_TRUE((*store)->AppendEvent("job-000001", "coordinator line", 1).ok());
  for (int i = 0; i < kMaxRankLinesPerJob + 5; ++i) {
    ASSERT_TRUE((*store)
                    ->AppendEvent("job-000001", absl::StrCat("line ", i), 2, {1, "w2", LOG_WARNING})
                    .ok());
  }
  absl::StatusOr<std::vector<LogEntry>> rank1 =
      (*store)->LogsAfter("job-000001", 0, 1, kMaxRankLinesPerJob * 2);
  ASSERT_TRUE(rank1.ok());
  ASSERT_EQ(rank1->size(), static_cast<size_t>(kMaxRankLinesPerJob));
  EXPECT_EQ(rank1->front().text(), "line 5");
  EXPECT_EQ(rank1->back().text(), absl::StrCat("line ", kMaxRankLinesPerJob + 4));
  EXPECT_EQ(rank1->back().worker_id(), "w2");
  EXPECT_EQ(rank1->back().severity(), LOG_WARNING);
  // The coordinator's own line is kept.
  absl::StatusOr<std::vector<LogEntry>> coordinator = (*store)->LogsAfter("job-000001", 0, -1);
  ASSERT_TRUE(coordinator.ok());
  ASSERT_EQ(coordinator->size(), 1u);
  EXPECT_EQ(coordinator->front().text(), "coordinator line");
}

TEST(JobStore, SealedCheckpointsAreListedAndTheLastIsRecorded) {
  auto store = JobStore::Open(TempDb("checkpoints"));
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->CreateJob(JobSpec(), "queued", 1).ok());
  ASSERT_TRUE((*store)->SetLocation("job-000001", "/c/job-000001", "h1", 10, 0).ok());
  for (int step : {10, 20}) {
    CheckpointInfo c;
    c.set_step(step);
    c.set_path(absl::StrCat("/c/job-000001/step_", step));
    c.set_time_unix_ms(step);
    ASSERT_TRUE((*store)->AddCheckpoint("job-000001", c).ok());
  }
  absl::StatusOr<Job> job = (*store)->GetJob("job-000001");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->checkpoint().dir(), "/c/job-000001");
  EXPECT_EQ(job->checkpoint().host(), "h1");
  EXPECT_EQ(job->checkpoint().interval_steps(), 10);
  EXPECT_EQ(job->checkpoint().last_sealed_step(), 20);
  absl::StatusOr<std::vector<CheckpointInfo>> all = (*store)->Checkpoints("job-000001");
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].step(), 10);
  EXPECT_EQ((*store)->Checkpoints("job-000009").status().code(), absl::StatusCode::kNotFound);
}

TEST(JobStore, ListingsCarrySummariesNotSpecs) {
  auto store = JobStore::Open(TempDb("summaries"));
  ASSERT_TRUE(store.ok());
  JobSpec spec = Spec("big");
  spec.set_steps(7);
  spec.set_dataset(std::string(1 << 20, 'd'));  // a spec of 1 MiB, as a coordinator once took
  spec.mutable_parallel()->set_pp(2);
  spec.mutable_parallel()->add_stage_layers(1);
  spec.mutable_parallel()->add_stage_layers(1);
  ASSERT_TRUE((*store)->CreateJob(spec, "q", 1).ok());
  absl::StatusOr<JobPage> page = (*store)->ListJobs(10);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->jobs.size(), 1u);
  const JobSpec& summary = page->jobs[0].spec();
  EXPECT_EQ(summary.name(), "big");
  EXPECT_EQ(summary.steps(), 7);
  EXPECT_EQ(summary.parallel().pp(), 2);
  EXPECT_TRUE(summary.dataset().empty());
  EXPECT_TRUE(summary.parallel().stage_layers().empty());
  EXPECT_FALSE(page->jobs[0].has_placement());
  EXPECT_LT(page->jobs[0].ByteSizeLong(), 200u);
  // GetJob still has the whole spec.
  EXPECT_EQ((*store)->GetJob("job-000001")->spec().dataset().size(), size_t{1} << 20);
}

TEST(JobStore, FindsJobsByNameWhateverTheirAge) {
  auto store = JobStore::Open(TempDb("by-name"));
  ASSERT_TRUE(store.ok());
  JobStore& s = **store;
  ASSERT_TRUE(s.CreateJob(Spec("needle"), "q", 0).ok());
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(s.CreateJob(Spec("hay"), "q", 1).ok());
  absl::StatusOr<JobPage> found = s.ListJobs(10, {}, 0, "needle");
  ASSERT_TRUE(found.ok());
  ASSERT_EQ(found->jobs.size(), 1u);
  EXPECT_EQ(found->jobs[0].id(), "job-000001");
  EXPECT_TRUE(s.ListJobs(10, {}, 0, "nothing")->jobs.empty());
  EXPECT_EQ(s.ListJobs(10, {}, 0, "hay")->jobs.size(), 10u);
}

TEST(JobStore, EachJobKeepsItsOwnerAndIsFoundByIt) {
  const std::string path = TempDb("by-owner");
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok());
    JobStore& s = **store;
    ASSERT_EQ(s.CreateJob(Spec("a"), "q", 0, "u1", "alice")->owner(), "alice");
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(s.CreateJob(Spec("b"), "q", 1, "u", "bob").ok());
    ASSERT_TRUE(s.CreateJob(Spec("a"), "q", 2, "u2", "alice").ok());
    ASSERT_TRUE(s.CreateJob(Spec("c"), "q", 3).ok());  // insecure: nobody's
  }
  auto store = JobStore::Open(path);  // across a reopen
  ASSERT_TRUE(store.ok());
  JobStore& s = **store;
  EXPECT_EQ(s.GetJob("job-000001")->owner(), "alice");
  EXPECT_EQ(s.GetJob("job-000008")->owner(), "");
  absl::StatusOr<JobPage> alices = s.ListJobs(10, {}, 0, std::nullopt, "alice");
  ASSERT_TRUE(alices.ok());
  ASSERT_EQ(alices->jobs.size(), 2u);
  EXPECT_EQ(alices->jobs[0].id(), "job-000007");  // newest first, with their owner
  EXPECT_EQ(alices->jobs[0].owner(), "alice");
  EXPECT_EQ(alices->jobs[1].id(), "job-000001");
  // With the other filters and pages.
  absl::StatusOr<JobPage> page = s.ListJobs(2, {QUEUED}, 0, "b", "bob");
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->jobs.size(), 2u);
  EXPECT_GT(page->next_before_seq, 0);
  EXPECT_EQ(s.ListJobs(10, {}, page->next_before_seq, "b", "bob")->jobs.size(), 3u);
  EXPECT_TRUE(s.ListJobs(10, {}, 0, "a", "bob")->jobs.empty());
  EXPECT_TRUE(s.ListJobs(10, {}, 0, std::nullopt, "mallory")->jobs.empty());
}

TEST(JobStore, TheHistoryRecordsChangesNotRestatements) {
  auto store = JobStore::Open(TempDb("restate"));
  ASSERT_TRUE(store.ok());
  JobStore& s = **store;
  ASSERT_TRUE(s.CreateJob(Spec("q"), "waiting for 2 workers", 0).ok());
  ASSERT_TRUE(s.UpdateState("job-000001", QUEUED, "waiting for 1 worker", 1).ok());
  ASSERT_TRUE(s.UpdateState("job-000001", QUEUED, "waiting for 2 workers", 2).ok());
  absl::StatusOr<Job> job = s.GetJob("job-000001");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->history_size(), 1);
  EXPECT_EQ(job->reason(), "waiting for 2 workers");  // the reason is current all the same
  ASSERT_TRUE(s.UpdateState("job-000001", PLACING, "placing", 3).ok());
  EXPECT_EQ(s.GetJob("job-000001")->history_size(), 2);
}

TEST(JobStore, TheDatabaseAndItsWalAreOwnerOnly) {
  const std::string path = TempDb("mode");
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->CreateJob(Spec("secret"), "q", 0).ok());  // the WAL exists now
    for (const std::string& file : {path, path + "-wal", path + "-shm", path + ".lock"}) {
      struct stat st;
      ASSERT_EQ(stat(file.c_str(), &st), 0) << file;
      EXPECT_EQ(st.st_mode & 0777, 0600) << file;
    }
  }
  // A database a coordinator before this rule left 0644 is narrowed when opened.
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  auto again = JobStore::Open(path);
  ASSERT_TRUE(again.ok());
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
}

}  // namespace
}  // namespace dtrain::coordinator
